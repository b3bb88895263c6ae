//! String templates in recipe args: `{dim}`, `{var}`, `{cycle}`, with an optional format
//! (`{lead:03}`, `{wet:.2f}`, or strftime for dates: `{day:%Y%m%d}`, `{cycle:%Y%m%dT%H%MZ}`);
//! lookups per dim value (`{radii[lead]}`, [`super::lookup`]); date-time arithmetic
//! (`{cycle + lead h:%Y%m%dT%H%MZ}`, `{lead h:PT%4HH%MM}`, [`super::time_expr`]); `{{` and `}}`
//! are literal braces.
//!
//! Vars and the cycle are filled in once when the recipe is compiled; dim references stay until
//! a task is dispatched, so a step whose args do not mention a dim costs nothing per task. What
//! a value brings in is never read as a template again: a var or table entry holding `{lead}`
//! is written as that text. `{input.NAME}` and `{output}` are a plugin's, passed through as
//! written; in an arg whose plugin fills them in ([`runner_plugin::ArgSpec::file_refs`]), every
//! other brace — of the recipe's text or of a value — is handed over doubled ([`Braces`]), so
//! that a value is never read as a reference either.

use serde_json::Value as Json;

pub use super::lookup::Lookup;
pub use super::template_format::{Format, FormatSpec, TemplateValue};
use super::time_expr::Evaluated;
pub use super::time_expr::TimeExpr;

/// How a filled-in template writes braces that are text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Braces {
    /// As they are.
    #[default]
    Plain,
    /// Doubled, for an arg whose plugin reads `{input.NAME}` and `{output}` in it
    /// ([`runner_plugin::file_refs`]).
    Doubled,
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq)]
pub enum Segment {
    /// Text as the recipe means it.
    Literal(String),
    /// Text already as the plugin is to see it (braces written as [`Braces`] says): what an
    /// earlier, partial fill made.
    Rendered(String),
    /// `{output}` or `{input.NAME}` (the text between the braces): the plugin's, not the
    /// recipe's.
    FileRef(String),
    Ref {
        name: String,
        format: Format,
        has_spec: bool,
    },
    /// `{table[dim]}`: the entry of a var for the task's value of a dim.
    Lookup {
        lookup: Lookup,
        format: Format,
        has_spec: bool,
    },
    /// `{cycle + lead h}`: a date-time or a duration.
    Time(TimeExpr),
}

impl Segment {
    /// The names whose values the segment needs (for a lookup, its dim).
    fn names(&self) -> impl Iterator<Item = &str> {
        let (one, expr) = match self {
            Segment::Literal(_) | Segment::Rendered(_) | Segment::FileRef(_) => (None, None),
            Segment::Ref { name, .. } => (Some(name.as_str()), None),
            Segment::Lookup { lookup, .. } => (Some(lookup.key.as_str()), None),
            Segment::Time(expr) => (None, Some(expr)),
        };
        one.into_iter().chain(expr.into_iter().flat_map(TimeExpr::names))
    }
}

/// A parsed template string.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub segments: Vec<Segment>,
    /// How text braces are written when it is filled in (set for the arg it is in).
    pub braces: Braces,
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
                    if !literal.is_empty() {
                        segments.push(Segment::Literal(std::mem::take(&mut literal)));
                    }
                    // A task's own files, which plugins such as `exec` fill in themselves at run
                    // time (`{input.NAME}`, `{output}`): passed through as written.
                    if runner_plugin::file_refs::is_reference(&body) {
                        segments.push(Segment::FileRef(body));
                        continue;
                    }
                    segments.push(parse_reference(&body)?);
                }
                _ => literal.push(c),
            }
        }
        if !literal.is_empty() {
            segments.push(Segment::Literal(literal));
        }
        Ok(Template { segments, braces: Braces::Plain })
    }

    /// Names referenced, in order (not the run-time file references plugins fill in): dims,
    /// vars and `cycle`, the dims that lookups index and the names in date-time arithmetic.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().flat_map(Segment::names)
    }

    /// Names referenced, each once, in order of first use.
    pub fn distinct_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for name in self.names() {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }

    pub fn has_refs(&self) -> bool {
        self.names().next().is_some()
    }

    /// True when two values of `name` may give the same text: a format that cuts or drops
    /// fields, a lookup (two values may have one entry), date-time arithmetic.
    pub fn may_merge(&self, name: &str) -> bool {
        self.segments.iter().any(|segment| match segment {
            Segment::Literal(_) | Segment::Rendered(_) | Segment::FileRef(_) => false,
            Segment::Ref { name: n, format, .. } => n == name && format.may_merge_values(),
            Segment::Lookup { lookup, .. } => lookup.key == name,
            Segment::Time(expr) => expr.names().any(|n| n == name),
        })
    }

    /// Every lookup, in segments and in date-time arithmetic (the compiler binds their tables).
    pub fn lookups_mut(&mut self) -> impl Iterator<Item = &mut Lookup> {
        self.segments.iter_mut().flat_map(|segment| {
            let (one, expr) = match segment {
                Segment::Lookup { lookup, .. } => (Some(lookup), None),
                Segment::Time(expr) => (None, Some(expr)),
                _ => (None, None),
            };
            one.into_iter().chain(expr.into_iter().flat_map(TimeExpr::lookups_mut))
        })
    }

    /// The lookups of segments (whose entries become text), not those inside arithmetic.
    pub fn text_lookups(&self) -> impl Iterator<Item = &Lookup> {
        self.segments.iter().filter_map(|segment| match segment {
            Segment::Lookup { lookup, .. } => Some(lookup),
            _ => None,
        })
    }

    /// Fills in the names `lookup` knows; the others stay as references. A string that is one
    /// reference or lookup without a format becomes the value itself (so `"{thresholds}"` can
    /// be a list). Text braces are written as [`Self::braces`] says. Nothing is allocated but the text,
    /// when every name is known and no brace is doubled.
    pub fn fill<'v>(&self, lookup: &dyn Fn(&str) -> Option<TemplateValue<'v>>) -> Result<Filled, String> {
        let braces = self.braces;
        match self.segments.as_slice() {
            [Segment::Ref { name, has_spec: false, .. }] => {
                if let Some(value) = lookup(name) {
                    return Ok(Filled::Value(braces.json(value.to_json())));
                }
            }
            [Segment::Lookup { lookup: table, has_spec: false, .. }] => {
                if let Some(entry) = table.resolve(lookup) {
                    return Ok(Filled::Value(braces.json(entry.clone())));
                }
            }
            _ => {}
        }
        let mut segments = Vec::new();
        let mut text = String::new();
        let mut keep = |segment: Segment, text: &mut String| {
            if !text.is_empty() {
                segments.push(Segment::Rendered(std::mem::take(text)));
            }
            segments.push(segment);
        };
        for segment in &self.segments {
            let from = text.len();
            match segment {
                Segment::Literal(l) => text.push_str(l),
                Segment::Rendered(r) => {
                    text.push_str(r);
                    continue;
                }
                Segment::FileRef(body) => {
                    text.push('{');
                    text.push_str(body);
                    text.push('}');
                    continue;
                }
                Segment::Ref { name, format, .. } => match lookup(name) {
                    Some(value) => value.format(format, &mut text).map_err(|e| format!("`{{{name}}}`: {e}"))?,
                    None => keep(segment.clone(), &mut text),
                },
                Segment::Lookup { lookup: table, format, .. } => match table.resolve(lookup) {
                    Some(entry) => TemplateValue::Json(entry)
                        .format(format, &mut text)
                        .map_err(|e| format!("`{{{}[{}]}}`: {e}", table.table, table.key))?,
                    None => keep(segment.clone(), &mut text),
                },
                Segment::Time(expr) => {
                    let context = |e: String| format!("`{{{}}}`: {e}", expr.text);
                    match expr.evaluate(lookup).map_err(context)? {
                        Evaluated::Seconds(seconds) => expr.write(seconds, &mut text).map_err(context)?,
                        Evaluated::Partial(rest) => keep(Segment::Time(rest), &mut text),
                    }
                }
            }
            braces.apply_from(&mut text, from);
        }
        if segments.is_empty() {
            return Ok(Filled::Value(Json::String(text)));
        }
        if !text.is_empty() {
            segments.push(Segment::Rendered(text));
        }
        Ok(Filled::Partial(Template { segments, braces }))
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
    let is_name = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-');
    if is_name(name) {
        let (format, has_spec) = parse_format(body, spec_text)?;
        return Ok(Segment::Ref { name: name.to_string(), format, has_spec });
    }
    // `table[index]`: one bracket pair, closing the name (`radii[` alone, or `radii[]x`, is not).
    let lookup_shaped = name.split_once('[').is_some_and(|(table, rest)| {
        is_name(table) && rest.strip_suffix(']').is_some_and(|index| !index.contains(['[', ']']))
    });
    if lookup_shaped && let Some(lookup) = Lookup::parse(name) {
        let (format, has_spec) = parse_format(body, spec_text)?;
        return Ok(Segment::Lookup { lookup: lookup?, format, has_spec });
    }
    if name.contains(|c: char| c.is_whitespace() || c == '+' || c == '-') {
        return TimeExpr::parse(name, spec_text).map(Segment::Time);
    }
    Err(format!(
        "`{{{body}}}` is not a reference; expected `{{name}}`, `{{name:format}}`, a lookup `{{var[dim]}}` or {}",
        super::time_expr::EXPRESSION_FORM
    ))
}

/// The format after the colon of `{body}`, if any.
fn parse_format(body: &str, spec_text: Option<&str>) -> Result<(Format, bool), String> {
    let Some(text) = spec_text else { return Ok((Format::default(), false)) };
    let format = Format::parse(text).map_err(|e| {
        // `e` is either the expected format alone or what is wrong and then what was expected.
        if e == FormatSpec::EXPECTED {
            format!("bad format `{text}` in `{{{body}}}`; expected {e}")
        } else {
            format!("bad format `{text}` in `{{{body}}}`: {e}")
        }
    })?;
    Ok((format, true))
}

impl Braces {
    /// Doubles the braces `text` gained from `from` on, when braces are doubled.
    fn apply_from(self, text: &mut String, from: usize) {
        // `from` is past the end when the segment was kept: its text went with the one before.
        if self == Braces::Plain || from >= text.len() || !text[from..].contains(['{', '}']) {
            return;
        }
        let written = text.split_off(from);
        runner_plugin::file_refs::escape(&written, text);
    }

    /// A value that became an arg as it is, with the braces of its strings (at any depth)
    /// doubled when braces are doubled.
    fn json(self, value: Json) -> Json {
        match (self, value) {
            (Braces::Plain, value) => value,
            (Braces::Doubled, Json::String(text)) => {
                let mut doubled = String::new();
                runner_plugin::file_refs::escape(&text, &mut doubled);
                Json::String(doubled)
            }
            (Braces::Doubled, Json::Array(items)) => Json::Array(items.into_iter().map(|i| self.json(i)).collect()),
            (Braces::Doubled, Json::Object(map)) => {
                Json::Object(map.into_iter().map(|(k, v)| (k, self.json(v))).collect())
            }
            (Braces::Doubled, other) => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::lookup::LookupTable;
    use runner_plugin::DimValue;
    use std::sync::Arc;

    fn render(text: &str, lookup: &dyn Fn(&str) -> Option<TemplateValue<'static>>) -> Result<Json, String> {
        match Template::parse(text)?.fill(lookup)? {
            Filled::Value(v) => Ok(v),
            Filled::Partial(t) => Err(format!("unresolved {t:?}")),
        }
    }

    const DAY: i64 = 4261 * 86_400;
    const HOUR: i64 = 20_758 * 86_400 + 3 * 3600;

    fn lookup(name: &str) -> Option<TemplateValue<'static>> {
        static WET: std::sync::LazyLock<Json> = std::sync::LazyLock::new(|| serde_json::json!(0.25));
        static LIST: std::sync::LazyLock<Json> = std::sync::LazyLock::new(|| serde_json::json!([1, 2]));
        match name {
            "lead" => Some(TemplateValue::Dim(DimValue::Int(7))),
            "neg" => Some(TemplateValue::Dim(DimValue::Int(-7))),
            "wet" => Some(TemplateValue::Json(&WET)),
            "list" => Some(TemplateValue::Json(&LIST)),
            "cycle" => Some(TemplateValue::Text("2026-11-30T02Z")),
            "day" => Some(TemplateValue::Dim(DimValue::Date(DAY))),
            "hour" => Some(TemplateValue::Dim(DimValue::Time(HOUR))),
            "name" => Some(TemplateValue::Text("not a date")),
            "model" => Some(TemplateValue::Dim(DimValue::Str(Arc::from("ukv")))),
            _ => None,
        }
    }

    #[test]
    fn formats() {
        assert_eq!(render("out/{cycle}/prob_T{lead:03}.npy", &lookup).unwrap(), "out/2026-11-30T02Z/prob_T007.npy");
        assert_eq!(render("{neg:04}", &lookup).unwrap(), "-007");
        assert_eq!(render("{wet:.3f}|{lead:x}|{lead:4}|{cycle:.4}", &lookup).unwrap(), "0.250|7|   7|2026");
        assert_eq!(render("{{literal}} {lead}", &lookup).unwrap(), "{literal} 7");
        assert_eq!(
            render("{wet:07.2f}|{neg:.1}|{wet}|{wet:6}|{lead:03x}", &lookup).unwrap(),
            "0000.25|-7.0|0.25|  0.25|007"
        );
        assert_eq!(render("[{model:5}]|[{model:.2}]|[{model:4.1}]", &lookup).unwrap(), "[ukv  ]|[uk]|[u   ]");
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
    fn time_arithmetic_gives_validity_times_and_durations() {
        assert_eq!(
            render("{cycle + lead h:%Y%m%dT%H%MZ}-{lead h:PT%4HH%MM}-air_temperature.nc", &lookup).unwrap(),
            "20261130T0900Z-PT0007H00M-air_temperature.nc"
        );
        assert_eq!(
            render("{cycle - 6h}|{lead h}|{hour + 90 m}", &lookup).unwrap(),
            "2026-11-29T20:00Z|PT7H|2026-11-01T04:30Z"
        );
        assert_eq!(
            render("{hour - day:PT%HH}|{day + lead d:%Y-%m-%d}", &lookup).unwrap(),
            format!("PT{}H|1981-09-08", (HOUR - DAY) / 3600)
        );
        assert_eq!(render("{ cycle+lead h :%H%M}", &lookup).unwrap(), "0900");
        // `-` inside a name is the name's: `{a-b}` is one name, `{a - b}` a subtraction.
        assert!(matches!(Template::parse("{cycle-6h}").unwrap().segments[0], Segment::Ref { .. }));
        assert_eq!(Template::parse("{cycle + lead h}").unwrap().names().collect::<Vec<_>>(), ["cycle", "lead"]);
    }

    #[test]
    fn a_bracket_that_is_not_a_lookup_is_an_error_not_a_panic() {
        // Found by the recipe fuzz target: an opening bracket at the end of the name.
        for text in ["{radii[}", "{radii---[}", "{radii[]x}", "{radii[lead]]}", "{radii[[lead]}"] {
            let error = Template::parse(text).expect_err(text);
            assert!(error.contains(text) && error.contains("expected"), "{text}: {error}");
        }
    }

    #[test]
    fn lookups_index_a_var_by_a_dim() {
        let lead = crate::recipe::Dim {
            name: "lead".into(),
            values: crate::recipe::DimValues::List(vec![DimValue::Int(7), DimValue::Int(8)]),
        };
        let radii = serde_json::json!({"7": 10000, "8": [1, 2]});
        let table = Arc::new(LookupTable::build("radii", &radii, &lead).unwrap());
        let bound = |text: &str| {
            let mut template = Template::parse(text).unwrap();
            template.lookups_mut().for_each(|l| l.entries = Some(table.clone()));
            template
        };
        let fill = |text: &str| match bound(text).fill(&lookup).unwrap() {
            Filled::Value(v) => v,
            Filled::Partial(t) => panic!("unresolved {t:?}"),
        };
        assert_eq!(fill("{radii[lead]}"), serde_json::json!(10000), "a lone lookup keeps its type");
        assert_eq!(fill("r{radii[lead]:06}m"), "r010000m");
        assert_eq!(fill("{cycle + radii[lead] s:%H%M%S}"), "044640");
        // Unbound (or with the dim unknown), a lookup stays as it is.
        let open = Template::parse("{radii[lead]}").unwrap().fill(&lookup).unwrap();
        assert!(matches!(open, Filled::Partial(_)), "{open:?}");
        assert!(Template::parse("{radii[lead]}").unwrap().may_merge("lead"));
    }

    #[test]
    fn filled_values_are_not_expanded_again() {
        let var = serde_json::json!("{lead}");
        let value = |name: &str| (name == "v").then_some(TemplateValue::Json(&var));
        let Filled::Value(filled) = Template::parse("x/{v}/{v:s}").unwrap().fill(&value).unwrap() else {
            panic!("every name is known")
        };
        assert_eq!(filled, "x/{lead}/{lead}");
        let partly = Template::parse("{v}{lead}").unwrap().fill(&value).unwrap();
        let Filled::Partial(rest) = partly else { panic!("lead is open") };
        assert_eq!(rest.segments[0], Segment::Rendered("{lead}".into()), "kept as text: {rest:?}");
        assert_eq!(render("{{lead}}", &lookup).unwrap(), "{lead}");
    }

    #[test]
    fn in_an_arg_with_file_refs_only_the_recipe_s_references_stay_single() {
        let var = serde_json::json!("{output}");
        let list = serde_json::json!(["{input.x}", 1]);
        let value = |name: &str| match name {
            "v" => Some(TemplateValue::Json(&var)),
            "l" => Some(TemplateValue::Json(&list)),
            "lead" => Some(TemplateValue::Dim(DimValue::Int(7))),
            _ => None,
        };
        let doubled = |text: &str| Template { braces: Braces::Doubled, ..Template::parse(text).unwrap() };
        let Filled::Value(filled) = doubled("{{a}} {output} {v} {input.x}").fill(&value).unwrap() else {
            panic!("every name is known")
        };
        assert_eq!(filled, "{{a}} {output} {{output}} {input.x}");
        let Filled::Value(lone) = doubled("{l}").fill(&value).unwrap() else { panic!("known") };
        assert_eq!(lone, serde_json::json!(["{{input.x}}", 1]), "a lone value's strings too");
        // Filled in two steps (vars at compile time, dims per task): the same text.
        let Filled::Partial(rest) = doubled("{v}-{lead}-{output}").fill(&|n| value(n).filter(|_| n == "v")).unwrap()
        else {
            panic!("lead is open")
        };
        assert_eq!(rest.fill(&value).unwrap(), Filled::Value("{{output}}-7-{output}".into()));
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
        assert_eq!(rest.names().collect::<Vec<_>>(), vec!["member", "lead"]);
        assert_eq!(rest.segments[0], Segment::Rendered("C/".into()));
    }

    #[test]
    fn errors_say_what_was_expected() {
        assert!(Template::parse("{lead").unwrap_err().contains("unclosed `{`"));
        assert!(Template::parse("a}b").unwrap_err().contains("unmatched `}`"));
        assert!(Template::parse("{}").unwrap_err().contains("empty `{}`"));
        assert!(Template::parse("{lead:zz}").unwrap_err().contains("bad format `zz`"));
        assert!(Template::parse("{lead:.2d}").unwrap_err().contains("precision does not apply"));
        assert!(Template::parse("{a.b}").unwrap_err().contains("`{a.b}` is not a reference; expected `{name}`"));
        assert!(Template::parse("{radii[]}").unwrap_err().contains("is not a lookup; expected `{var[dim]}`"));
        let e = render("{cycle:d}", &lookup).unwrap_err();
        assert!(e.contains("needs an integer"), "{e}");
        let e = render("{name + lead h}", &lookup).unwrap_err();
        assert!(e.starts_with("`{name + lead h}`: `name` is `not a date`, which is not a date-time"), "{e}");
    }
}
