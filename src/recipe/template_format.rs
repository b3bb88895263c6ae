//! How one template value is written: the format after the colon of `{name:format}`
//! (`[0][width][.precision][d|f|x|s]`, or strftime for dates), and the values a template can
//! refer to (a dim's value, a var's JSON, the cycle's text).

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
    pub(super) const EXPECTED: &'static str = "a format like `03`, `5`, `.2f`, `x` or `s` \
        ([0][width][.precision][d|f|x|s])";
    /// Widest width and longest precision (the formatter itself takes at most 65535).
    const MAX_DIGITS: usize = 255;

    pub(super) fn parse(spec: &str) -> Result<FormatSpec, String> {
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
    pub(super) fn parse(text: &str) -> Result<Format, String> {
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
#[derive(Debug, Clone)]
pub enum TemplateValue<'a> {
    /// A dim's value for the task (cheap to clone: a number, or a shared string).
    Dim(DimValue),
    Json(&'a Json),
    Text(&'a str),
}

impl TemplateValue<'_> {
    /// The value as typed JSON (used when a string is exactly one reference with no format).
    pub(super) fn to_json(&self) -> Json {
        match self {
            TemplateValue::Dim(DimValue::Int(i)) => Json::from(*i),
            TemplateValue::Dim(DimValue::Str(s)) => Json::from(&**s),
            TemplateValue::Dim(time @ (DimValue::Date(_) | DimValue::Time(_))) => Json::from(time.to_string()),
            TemplateValue::Json(j) => (*j).clone(),
            TemplateValue::Text(t) => Json::from(*t),
        }
    }

    /// Appends the value in `format` to `out`.
    pub(super) fn format(&self, format: &Format, out: &mut String) -> Result<(), String> {
        match format {
            Format::Plain(spec) => self.format_plain(spec, out),
            Format::Time(format) => self.format_time(format, out),
        }
    }

    /// The value as seconds since the epoch: a date dim's value, or a string that is a date or
    /// date-time.
    pub(super) fn as_instant(&self) -> Option<i64> {
        match self {
            TemplateValue::Dim(value) => value.as_epoch_seconds(),
            TemplateValue::Json(Json::String(s)) => parse_instant(s).map(|i| i.seconds),
            TemplateValue::Text(s) => parse_instant(s).map(|i| i.seconds),
            TemplateValue::Json(_) => None,
        }
    }

    /// strftime of a date dim's value, or of a string that is a date or date-time.
    fn format_time(&self, format: &TimeFormat, out: &mut String) -> Result<(), String> {
        match self.as_instant() {
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
    pub(super) fn text(&self) -> String {
        self.with_text(str::to_string)
    }

    /// Calls `f` with the value's text, borrowed where the value is a string already (as it is
    /// per task for string dims: no allocation).
    fn with_text<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        match self {
            TemplateValue::Dim(DimValue::Str(s)) => f(s),
            TemplateValue::Json(Json::String(s)) => f(s),
            TemplateValue::Text(t) => f(t),
            TemplateValue::Dim(d) => f(&d.to_string()),
            TemplateValue::Json(j) => f(&j.to_string()),
        }
    }

    /// The value as a number, if it is one (a string that parses as one when `parse_strings`).
    pub(super) fn as_number(&self, parse_strings: bool) -> Option<Number> {
        fn parse_number(s: &str) -> Option<Number> {
            match s.trim().parse::<i64>() {
                Ok(i) => Some(Number::Int(i)),
                Err(_) => s.trim().parse::<f64>().ok().filter(|f| f.is_finite()).map(Number::Float),
            }
        }
        match self {
            TemplateValue::Dim(DimValue::Int(i)) => Some(Number::Int(*i)),
            TemplateValue::Json(Json::Number(n)) => match n.as_i64() {
                Some(i) => Some(Number::Int(i)),
                None => n.as_f64().map(Number::Float),
            },
            TemplateValue::Json(Json::String(s)) if parse_strings => parse_number(s),
            TemplateValue::Text(s) if parse_strings => parse_number(s),
            _ => None,
        }
    }

    /// Writes the value with `spec` straight into `out` (the formatter pads and cuts: nothing
    /// is allocated for numbers and strings).
    fn format_plain(&self, spec: &FormatSpec, out: &mut String) -> Result<(), String> {
        let number = self.as_number(spec.needs_number());
        let width = spec.width;
        let written = match (spec.kind, number) {
            (Some('d') | None, Some(Number::Int(i))) if spec.precision.is_none() => match spec.zero_pad {
                true => write!(out, "{i:0width$}"),
                false => write!(out, "{i:>width$}"),
            },
            (Some('x'), Some(Number::Int(i))) => match spec.zero_pad {
                true => write!(out, "{i:0width$x}"),
                false => write!(out, "{i:>width$x}"),
            },
            (Some('f') | None, Some(number)) => {
                let f = match number {
                    Number::Int(i) => i as f64,
                    Number::Float(f) => f,
                };
                match (spec.kind, spec.precision, number, spec.zero_pad) {
                    // A float without a format shows as it is (`0.25`), not at six digits.
                    (None, None, Number::Float(_), true) => write!(out, "{f:0width$}"),
                    (None, None, Number::Float(_), false) => write!(out, "{f:>width$}"),
                    (_, precision, _, true) => write!(out, "{f:0width$.p$}", p = precision.unwrap_or(6)),
                    (_, precision, _, false) => write!(out, "{f:>width$.p$}", p = precision.unwrap_or(6)),
                }
            }
            (Some('d' | 'x'), _) => return Err(format!("format `{}` needs an integer", spec_text(spec))),
            (Some('f'), None) => return Err(format!("format `{}` needs a number", spec_text(spec))),
            _ if spec.zero_pad => return Err("zero padding needs a number".into()),
            _ => self.with_text(|text| match spec.precision {
                Some(p) => write!(out, "{text:<width$.p$}"),
                None => write!(out, "{text:<width$}"),
            }),
        };
        written.map_err(|_| "the value cannot be written".to_string())
    }
}

/// A template value that is a number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    Int(i64),
    Float(f64),
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

/// Bytes of `value` as JSON text (strings without quotes), counted without building it.
pub(super) fn json_len(value: &Json) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    match value {
        Json::String(s) => s.len(),
        other => {
            let mut count = Count(0);
            let _ = serde_json::to_writer(&mut count, other);
            count.0
        }
    }
}
