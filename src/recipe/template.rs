//! String templates in recipe args: `{dim}`, `{var}`, `{cycle}`, with an optional format
//! (`{lead:03}`, `{wet:.2f}`, or strftime for dates: `{day:%Y%m%d}`, `{cycle:%Y%m%dT%H%MZ}`);
//! `{{` and `}}` are literal braces.
//!
//! Vars and the cycle are filled in once when the recipe is compiled; dim references stay until
//! a task is dispatched, so a step whose args do not mention a dim costs nothing per task.

use std::fmt::Write as _;

use runner_plugin::DimValue;
use serde_json::Value as Json;

use super::time::{TimeFormat, parse_instant};

/// How to format one value: `[0][width][.precision][type]` with type `d`, `f`, `x` or `s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FormatSpec {
    pub zero_pad: bool,
    pub width: usize,
    pub precision: Option<usize>,
    pub kind: Option<char>,
}

impl FormatSpec {
    const EXPECTED: &'static str = "a format like `03`, `5`, `.2f`, `x` or `s` \
        ([0][width][.precision][d|f|x|s])";
    /// Widest width and longest precision (the formatter itself takes at most 65535).
    const MAX_DIGITS: usize = 255;

    fn parse(spec: &str) -> Result<FormatSpec, String> {
        let mut rest = spec;
        let zero_pad = rest.starts_with('0') && rest.len() > 1;
        if zero_pad {
            rest = &rest[1..];
        }
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        let width = if digits == 0 { 0 } else { rest[..digits].parse().map_err(|_| Self::EXPECTED.to_string())? };
        rest = &rest[digits..];
        let mut precision = None;
        if let Some(after_dot) = rest.strip_prefix('.') {
            let digits = after_dot.chars().take_while(char::is_ascii_digit).count();
            if digits == 0 {
                return Err(Self::EXPECTED.to_string());
            }
            precision = Some(after_dot[..digits].parse().map_err(|_| Self::EXPECTED.to_string())?);
            rest = &after_dot[digits..];
        }
        let kind = match rest {
            "" => None,
            "d" | "f" | "x" | "s" => rest.chars().next(),
            _ => return Err(Self::EXPECTED.to_string()),
        };
        if precision.is_some() && matches!(kind, Some('d' | 'x')) {
            return Err(format!("precision does not apply to integers; expected {}", Self::EXPECTED));
        }
        if width.max(precision.unwrap_or(0)) > Self::MAX_DIGITS {
            return Err(format!("width or precision too large; expected at most {}", Self::MAX_DIGITS));
        }
        Ok(FormatSpec { zero_pad, width, precision, kind })
    }

    /// True when the format needs an integer (`d`, `x`) or a number (`f`).
    pub fn needs_number(&self) -> bool {
        matches!(self.kind, Some('d' | 'x' | 'f')) || self.zero_pad
    }
}

/// How to format one value: `[0][width][.precision][type]`, or strftime (it has a `%`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    Plain(FormatSpec),
    Time(TimeFormat),
}

impl Default for Format {
    fn default() -> Format {
        Format::Plain(FormatSpec::default())
    }
}

impl Format {
    fn parse(text: &str) -> Result<Format, String> {
        if text.contains('%') {
            TimeFormat::parse(text).map(Format::Time)
        } else {
            FormatSpec::parse(text).map(Format::Plain)
        }
    }

    /// True when the format needs a number: a dim of strings or dates cannot have it.
    pub fn needs_number(&self) -> bool {
        matches!(self, Format::Plain(spec) if spec.needs_number())
    }

    /// True for a strftime format: only dates, times and values that parse as one can have it.
    pub fn is_time(&self) -> bool {
        matches!(self, Format::Time(_))
    }

    /// True when two different values may format alike (a string cut to a precision, a date
    /// format without every field of the dim's step).
    pub fn may_merge_values(&self) -> bool {
        match self {
            Format::Plain(spec) => spec.precision.is_some() && !matches!(spec.kind, Some('f')),
            Format::Time(_) => true,
        }
    }

    /// Most bytes a value whose own text (`{name}` without a format) is at most `value_len`
    /// bytes formats to: a number gains at most a point and its precision's digits.
    pub fn max_len(&self, value_len: usize) -> usize {
        match self {
            Format::Plain(spec) => (value_len + 1 + spec.precision.unwrap_or(6)).max(spec.width),
            Format::Time(format) => format.max_len(),
        }
    }
}

/// A value a template can refer to.
#[derive(Debug, Clone, Copy)]
pub enum TemplateValue<'a> {
    Dim(&'a DimValue),
    Json(&'a Json),
    Text(&'a str),
}

impl TemplateValue<'_> {
    /// The value as typed JSON (used when a string is exactly one reference with no format).
    fn to_json(self) -> Json {
        match self {
            TemplateValue::Dim(DimValue::Int(i)) => Json::from(*i),
            TemplateValue::Dim(DimValue::Str(s)) => Json::from(&**s),
            TemplateValue::Dim(time @ (DimValue::Date(_) | DimValue::Time(_))) => Json::from(time.to_string()),
            TemplateValue::Json(j) => j.clone(),
            TemplateValue::Text(t) => Json::from(t),
        }
    }

    fn format(self, format: &Format, out: &mut String) -> Result<(), String> {
        match format {
            Format::Plain(spec) => self.format_plain(spec, out),
            Format::Time(format) => self.format_time(format, out),
        }
    }

    /// strftime of a date dim's value, or of a string that is a date or date-time.
    fn format_time(self, format: &TimeFormat, out: &mut String) -> Result<(), String> {
        let seconds = match self {
            TemplateValue::Dim(value) => value.as_epoch_seconds(),
            TemplateValue::Json(Json::String(s)) => parse_instant(s).map(|i| i.seconds),
            TemplateValue::Text(s) => parse_instant(s).map(|i| i.seconds),
            TemplateValue::Json(_) => None,
        };
        match seconds {
            Some(seconds) => format.write(seconds, out),
            None => Err(format!(
                "the date format `{}` needs a date or date-time, but the value is `{}`; expected {}",
                format.as_str(),
                super::diagnostic::shorten(&self.text(), 40),
                super::time::INSTANT_FORMS
            )),
        }
    }

    /// The value's text as a plain `{name}` shows it.
    fn text(self) -> String {
        match self {
            TemplateValue::Dim(d) => d.to_string(),
            TemplateValue::Json(Json::String(s)) => s.clone(),
            TemplateValue::Json(j) => j.to_string(),
            TemplateValue::Text(t) => t.to_string(),
        }
    }

    fn format_plain(self, spec: &FormatSpec, out: &mut String) -> Result<(), String> {
        enum Num {
            Int(i64),
            Float(f64),
        }
        let number = match self {
            TemplateValue::Dim(DimValue::Int(i)) => Some(Num::Int(*i)),
            TemplateValue::Json(Json::Number(n)) => match n.as_i64() {
                Some(i) => Some(Num::Int(i)),
                None => n.as_f64().map(Num::Float),
            },
            TemplateValue::Json(Json::String(s)) if spec.needs_number() => parse_number(s),
            TemplateValue::Text(s) if spec.needs_number() => parse_number(s),
            _ => None,
        };
        fn parse_number(s: &str) -> Option<Num> {
            match s.trim().parse::<i64>() {
                Ok(i) => Some(Num::Int(i)),
                Err(_) => s.trim().parse::<f64>().ok().map(Num::Float),
            }
        }
        let width = spec.width;
        match (spec.kind, number) {
            (Some('d'), Some(Num::Int(i))) | (None, Some(Num::Int(i))) if spec.precision.is_none() => {
                pad_number(out, &i.to_string(), spec)
            }
            (Some('x'), Some(Num::Int(i))) => pad_number(out, &format!("{i:x}"), spec),
            (Some('f') | None, Some(Num::Int(i))) => {
                pad_number(out, &format!("{:.*}", spec.precision.unwrap_or(6), i as f64), spec)
            }
            (Some('f') | None, Some(Num::Float(f))) => {
                let text = match (spec.kind, spec.precision) {
                    (None, None) => f.to_string(),
                    (_, precision) => format!("{:.*}", precision.unwrap_or(6), f),
                };
                pad_number(out, &text, spec)
            }
            (Some('d' | 'x'), _) => return Err(format!("format `{}` needs an integer", spec_text(spec))),
            (Some('f'), None) => return Err(format!("format `{}` needs a number", spec_text(spec))),
            _ if spec.zero_pad => return Err("zero padding needs a number".into()),
            _ => {
                let text = self.text();
                let text = match spec.precision {
                    Some(p) => text.chars().take(p).collect(),
                    None => text,
                };
                let _ = write!(out, "{text:<width$}");
            }
        }
        Ok(())
    }
}

fn pad_number(out: &mut String, digits: &str, spec: &FormatSpec) {
    let width = spec.width;
    if spec.zero_pad {
        match digits.strip_prefix('-') {
            Some(abs) => {
                let _ = write!(out, "-{abs:0>w$}", w = width.saturating_sub(1));
            }
            None => {
                let _ = write!(out, "{digits:0>width$}");
            }
        }
    } else {
        let _ = write!(out, "{digits:>width$}");
    }
}

fn spec_text(spec: &FormatSpec) -> String {
    let mut s = String::new();
    if spec.zero_pad {
        s.push('0');
    }
    if spec.width > 0 {
        s.push_str(&spec.width.to_string());
    }
    if let Some(p) = spec.precision {
        let _ = write!(s, ".{p}");
    }
    if let Some(k) = spec.kind {
        s.push(k);
    }
    s
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq)]
pub enum Segment {
    Literal(String),
    Ref { name: String, format: Format, has_spec: bool },
}

/// A parsed template string.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub segments: Vec<Segment>,
}

impl Template {
    /// Parses `text`; the error says what is wrong (unbalanced brace, empty name, bad format).
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut segments = Vec::new();
        let mut literal = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((at, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|&(_, n)| n) == Some('{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek().map(|&(_, n)| n) == Some('}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => {
                    return Err(format!(
                        "unmatched `}}` at character {}; expected a `{{` before it, or `}}}}` for a literal brace",
                        at + 1
                    ));
                }
                '{' => {
                    let mut body = String::new();
                    let mut closed = false;
                    for (_, c) in chars.by_ref() {
                        if c == '}' {
                            closed = true;
                            break;
                        }
                        body.push(c);
                    }
                    if !closed {
                        return Err(format!(
                            "unclosed `{{` at character {}; expected a `}}` after the name, or `{{{{` for a literal brace",
                            at + 1
                        ));
                    }
                    // A task's own files, which plugins such as `exec` fill in themselves at run
                    // time (`{input.NAME}`, `{output}`): passed through as written.
                    if is_plugin_reference(&body) {
                        literal.push('{');
                        literal.push_str(&body);
                        literal.push('}');
                        continue;
                    }
                    if !literal.is_empty() {
                        segments.push(Segment::Literal(std::mem::take(&mut literal)));
                    }
                    segments.push(parse_reference(&body)?);
                }
                _ => literal.push(c),
            }
        }
        if !literal.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        Ok(Template { segments })
    }

    /// Names referenced, in order (not the run-time file references plugins fill in).
    pub fn names(&self) -> impl Iterator<Item = (&str, &Format)> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Ref { name, format, .. } => Some((name.as_str(), format)),
            Segment::Literal(_) => None,
        })
    }

    /// Names referenced, each once, in order of first use (a template may use one name many
    /// times; callers look each up once).
    pub fn distinct_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (name, _) in self.names() {
            if seen.insert(name) {
                names.push(name);
            }
        }
        names
    }

    pub fn has_refs(&self) -> bool {
        self.names().next().is_some()
    }

    /// Fills in the names `lookup` knows; the others stay as references. A string that is one
    /// reference without a format becomes the value itself (so `"{thresholds}"` can be a list).
    pub fn fill<'v>(&self, lookup: &dyn Fn(&str) -> Option<TemplateValue<'v>>) -> Result<Filled, String> {
        if let [Segment::Ref { name, has_spec: false, .. }] = self.segments.as_slice()
            && let Some(value) = lookup(name)
        {
            return Ok(Filled::Value(value.to_json()));
        }
        let mut segments = Vec::with_capacity(self.segments.len());
        let mut text = String::new();
        for segment in &self.segments {
            match segment {
                Segment::Literal(l) => text.push_str(l),
                Segment::Ref { name, format, .. } => match lookup(name) {
                    Some(value) => value.format(format, &mut text).map_err(|e| format!("`{{{name}}}`: {e}"))?,
                    None => {
                        if !text.is_empty() {
                            segments.push(Segment::Literal(std::mem::take(&mut text)));
                        }
                        segments.push(segment.clone());
                    }
                },
            }
        }
        if segments.is_empty() {
            return Ok(Filled::Value(Json::String(text)));
        }
        if !text.is_empty() {
            segments.push(Segment::Literal(text));
        }
        Ok(Filled::Partial(Template { segments }))
    }
}

/// The result of filling a template.
#[derive(Debug, Clone, PartialEq)]
pub enum Filled {
    Value(Json),
    Partial(Template),
}

fn parse_reference(body: &str) -> Result<Segment, String> {
    let (name, spec_text) = match body.split_once(':') {
        Some((name, spec)) => (name, Some(spec)),
        None => (body, None),
    };
    let name = name.trim();
    if name.is_empty() {
        return Err("empty `{}` in a template; expected a dim, var or `cycle` name inside the braces".into());
    }
    if !name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-') {
        return Err(format!("`{{{body}}}` is not a reference; expected `{{name}}` or `{{name:format}}`"));
    }
    let format = match spec_text {
        Some(text) => Format::parse(text).map_err(|e| {
            // `e` is either the expected format alone or what is wrong and then what was expected.
            if e == FormatSpec::EXPECTED {
                format!("bad format `{text}` in `{{{body}}}`; expected {e}")
            } else {
                format!("bad format `{text}` in `{{{body}}}`: {e}")
            }
        })?,
        None => Format::default(),
    };
    Ok(Segment::Ref { name: name.to_string(), format, has_spec: spec_text.is_some() })
}

/// `{output}` and `{input.NAME}`: references to a task's files that a plugin renders at run time
/// (as `exec` does), not names the recipe fills in.
pub fn is_plugin_reference(body: &str) -> bool {
    body == "output"
        || body
            .strip_prefix("input.")
            .is_some_and(|name| !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(text: &str, lookup: &dyn Fn(&str) -> Option<TemplateValue<'static>>) -> Result<Json, String> {
        match Template::parse(text)?.fill(lookup)? {
            Filled::Value(v) => Ok(v),
            Filled::Partial(t) => Err(format!("unresolved {t:?}")),
        }
    }

    static LEAD: DimValue = DimValue::Int(7);
    static NEG: DimValue = DimValue::Int(-7);
    static DAY: DimValue = DimValue::Date(4261 * 86_400);
    static HOUR: DimValue = DimValue::Time(20_758 * 86_400 + 3 * 3600);

    fn lookup(name: &str) -> Option<TemplateValue<'static>> {
        static WET: std::sync::LazyLock<Json> = std::sync::LazyLock::new(|| serde_json::json!(0.25));
        static LIST: std::sync::LazyLock<Json> = std::sync::LazyLock::new(|| serde_json::json!([1, 2]));
        match name {
            "lead" => Some(TemplateValue::Dim(&LEAD)),
            "neg" => Some(TemplateValue::Dim(&NEG)),
            "wet" => Some(TemplateValue::Json(&WET)),
            "list" => Some(TemplateValue::Json(&LIST)),
            "cycle" => Some(TemplateValue::Text("2026-11-30T02Z")),
            "day" => Some(TemplateValue::Dim(&DAY)),
            "hour" => Some(TemplateValue::Dim(&HOUR)),
            "name" => Some(TemplateValue::Text("not a date")),
            _ => None,
        }
    }

    #[test]
    fn formats() {
        assert_eq!(render("out/{cycle}/prob_T{lead:03}.npy", &lookup).unwrap(), "out/2026-11-30T02Z/prob_T007.npy");
        assert_eq!(render("{neg:04}", &lookup).unwrap(), "-007");
        assert_eq!(render("{wet:.3f}|{lead:x}|{lead:4}|{cycle:.4}", &lookup).unwrap(), "0.250|7|   7|2026");
        assert_eq!(render("{{literal}} {lead}", &lookup).unwrap(), "{literal} 7");
    }

    #[test]
    fn dates_format_with_strftime() {
        assert_eq!(render("{day:%Y%m}/oisst.{day:%Y%m%d}.nc", &lookup).unwrap(), "198109/oisst.19810901.nc");
        assert_eq!(render("{day}|{hour}", &lookup).unwrap(), "1981-09-01|2026-11-01T03:00Z");
        assert_eq!(render("{hour:%Y-%m-%dT%H:%M}", &lookup).unwrap(), "2026-11-01T03:00");
        assert_eq!(render("{cycle:%Y%m%dT%H%MZ}", &lookup).unwrap(), "20261130T0200Z");
        assert_eq!(render("{day}", &lookup).unwrap(), serde_json::json!("1981-09-01"));
        let e = render("{name:%Y}", &lookup).unwrap_err();
        assert!(e.contains("needs a date or date-time, but the value is `not a date`"), "{e}");
        assert!(render("{lead:%Y}", &lookup).unwrap_err().contains("needs a date"));
        assert!(Template::parse("{day:%Q}").unwrap_err().contains("bad date format `%Q`"));
        assert!(render("{day:03}", &lookup).unwrap_err().contains("zero padding needs a number"));
    }

    #[test]
    fn lone_reference_keeps_its_type() {
        assert_eq!(render("{wet}", &lookup).unwrap(), serde_json::json!(0.25));
        assert_eq!(render("{list}", &lookup).unwrap(), serde_json::json!([1, 2]));
        assert_eq!(render("{lead}", &lookup).unwrap(), serde_json::json!(7));
    }

    #[test]
    fn partial_fill_keeps_unknown_names() {
        let t = Template::parse("{cycle}/{member}/{lead:02}").unwrap();
        let Filled::Partial(rest) = t.fill(&|n| (n == "cycle").then_some(TemplateValue::Text("C"))).unwrap() else {
            panic!("expected partial");
        };
        assert_eq!(rest.names().map(|(n, _)| n).collect::<Vec<_>>(), vec!["member", "lead"]);
        assert_eq!(rest.segments[0], Segment::Literal("C/".into()));
    }

    #[test]
    fn errors_say_what_was_expected() {
        assert!(Template::parse("{lead").unwrap_err().contains("unclosed `{`"));
        assert!(Template::parse("a}b").unwrap_err().contains("unmatched `}`"));
        assert!(Template::parse("{}").unwrap_err().contains("empty `{}`"));
        assert!(Template::parse("{lead:zz}").unwrap_err().contains("bad format `zz`"));
        assert!(Template::parse("{lead:.2d}").unwrap_err().contains("precision does not apply"));
        let e = render("{cycle:d}", &lookup).unwrap_err();
        assert!(e.contains("needs an integer"), "{e}");
    }
}
