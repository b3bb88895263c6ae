//! Date-time arithmetic in templates: `{cycle + lead h}` (the validity time of a lead),
//! `{valid - 6h}`, `{valid - cycle}` (a duration), `{lead h}` (a duration alone), with a strftime
//! format for a date-time (`{cycle + lead h:%Y%m%dT%H%MZ}`) or a duration format for a duration
//! (`{lead h:PT%4HH%MM}` → `PT0003H00M`).
//!
//! An expression is terms joined by `+` and `-`. A term is a name (the cycle, a var, a dim of
//! the step) or a lookup (`offsets[lead]`), optionally followed by a unit (`s`, `m`, `h`, `d`),
//! or a number with a unit (`6h`, `30 m`). A term with a unit is a duration; one without is a
//! date-time. Which an expression gives is known from how it is written: one date-time more
//! added than subtracted gives a date-time, as many added as subtracted give a duration.
//! Numbers, vars and the cycle are summed once when the recipe is compiled; a task adds only
//! its dims' terms, without allocating.

use std::fmt::Write as _;

use runner_plugin::DimValue;

use super::lookup::Lookup;
use super::template_format::{Number, TemplateValue};
use super::time::{DurationFormat, INSTANT_FORMS, TimeFormat, Unit};

/// A date-time expression of a template.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeExpr {
    /// The expression as written (without the format), for messages.
    pub text: String,
    /// The terms not yet known: dims (and, before the recipe is compiled, vars and the cycle).
    pub terms: Vec<Term>,
    /// Seconds of the terms already summed: numbers, and vars and the cycle once compiled.
    pub offset: i64,
    pub format: ExprFormat,
}

/// One `+ name unit` of an expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    pub negative: bool,
    pub operand: Operand,
    /// `None`: the operand is a date-time.
    pub unit: Option<Unit>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    Name(String),
    Lookup(Lookup),
}

/// How the result is written.
#[derive(Debug, Clone, PartialEq)]
pub enum ExprFormat {
    /// A date-time: strftime, or by default as dims show one (`2026-12-01T03:00Z`).
    Instant(Option<TimeFormat>),
    Duration(DurationFormat),
}

/// An expression with every term known, or what remains of it.
#[derive(Debug)]
pub enum Evaluated {
    Seconds(i64),
    Partial(TimeExpr),
}

/// What an expression may be, for messages.
pub const EXPRESSION_FORM: &str = "date-time arithmetic such as `{cycle + lead h}`, `{valid - 6h}` or `{lead h}` \
    (a name or number, a unit `s`, `m`, `h` or `d` after it for a duration, joined by ` + ` and ` - `)";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Token<'a> {
    Plus,
    Minus,
    Word(&'a str),
}

/// Splits at spaces and `+`; a `-` at the start of a word is an operator (names may hold `-`:
/// `{a - b}` subtracts, `{a-b}` is a name); brackets keep their spaces (`radii[ lead ]`).
fn tokens(text: &str) -> Vec<Token<'_>> {
    let mut tokens = Vec::new();
    let mut start: Option<usize> = None;
    let mut depth = 0usize;
    for (at, c) in text.char_indices() {
        if let Some(from) = start {
            match c {
                '[' => depth += 1,
                ']' => depth = depth.saturating_sub(1),
                _ if depth > 0 => {}
                '+' => {
                    tokens.push(Token::Word(&text[from..at]));
                    tokens.push(Token::Plus);
                    start = None;
                }
                _ if c.is_whitespace() => {
                    tokens.push(Token::Word(&text[from..at]));
                    start = None;
                }
                _ => {}
            }
            continue;
        }
        match c {
            '+' => tokens.push(Token::Plus),
            '-' => tokens.push(Token::Minus),
            _ if c.is_whitespace() => {}
            _ => {
                start = Some(at);
                depth = usize::from(c == '[');
            }
        }
    }
    if let Some(from) = start {
        tokens.push(Token::Word(&text[from..]));
    }
    tokens
}

impl TimeExpr {
    /// Parses expression `text` with the format after its colon; the error says what is wrong.
    pub fn parse(text: &str, format: Option<&str>) -> Result<TimeExpr, String> {
        let bad = |why: String| format!("`{{{text}}}`: {why}; expected {EXPRESSION_FORM}");
        let mut words = tokens(text).into_iter().peekable();
        let (mut terms, mut offset, mut dates) = (Vec::new(), 0i64, 0i64);
        let mut negative = false;
        if let Some(&(Token::Plus | Token::Minus)) = words.peek() {
            negative = words.next() == Some(Token::Minus);
        }
        loop {
            let word = match words.next() {
                Some(Token::Word(word)) => word,
                Some(_) => return Err(bad("two operators in a row".into())),
                None => return Err(bad("it ends with an operator".into())),
            };
            let separate_unit = match words.peek() {
                Some(&Token::Word(next)) => Unit::parse(next).inspect(|_| {
                    words.next();
                }),
                _ => None,
            };
            match parse_operand(word).map_err(&bad)? {
                Parsed::Number(number, attached) => {
                    let unit = match (attached, separate_unit) {
                        (Some(unit), None) | (None, Some(unit)) => unit,
                        (Some(_), Some(_)) => return Err(bad(format!("`{word}` has two units"))),
                        (None, None) => {
                            return Err(bad(format!(
                                "the number {number} needs a unit: {} (e.g. `{number}h`)",
                                Unit::WRITTEN
                            )));
                        }
                    };
                    let seconds = number.checked_mul(unit.seconds()).map(|s| if negative { -s } else { s });
                    offset = seconds
                        .and_then(|s| offset.checked_add(s))
                        .ok_or_else(|| bad(format!("`{word}` is too long a duration")))?;
                }
                Parsed::Operand(operand) => {
                    if separate_unit.is_none() {
                        dates += if negative { -1 } else { 1 };
                    }
                    terms.push(Term { negative, operand, unit: separate_unit });
                }
            }
            match words.next() {
                None => break,
                Some(Token::Plus) => negative = false,
                Some(Token::Minus) => negative = true,
                Some(Token::Word(next)) => {
                    return Err(bad(format!(
                        "`{next}` follows `{word}`; expected ` + `, ` - ` or a unit {}",
                        Unit::WRITTEN
                    )));
                }
            }
        }
        let spec = format.unwrap_or("");
        let format = match dates {
            0 => ExprFormat::Duration(
                DurationFormat::parse(spec).map_err(|e| format!("`{{{text}}}` is a duration: {e}"))?,
            ),
            1 if spec.is_empty() => ExprFormat::Instant(None),
            1 if spec.contains('%') => ExprFormat::Instant(Some(TimeFormat::parse(spec)?)),
            1 => {
                return Err(format!(
                    "bad format `{spec}` in `{{{text}:{spec}}}`: it is a date-time; expected a strftime format such as `%Y%m%dT%H%MZ`"
                ));
            }
            _ => {
                let names: Vec<String> = terms.iter().filter(|t| t.unit.is_none()).map(|t| t.written()).collect();
                let what = if dates > 1 { "adds two date-times" } else { "subtracts more date-times than it adds" };
                return Err(format!(
                    "`{{{text}}}`: it {what} ({}); expected one date-time plus or minus durations, each with its unit (`lead h`, `6h`)",
                    names.join(", ")
                ));
            }
        };
        Ok(TimeExpr { text: text.trim().to_string(), terms, offset, format })
    }

    pub fn is_instant(&self) -> bool {
        matches!(self.format, ExprFormat::Instant(_))
    }

    /// The names whose values the expression still needs: operands, and the dims of lookups.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|term| match &term.operand {
            Operand::Name(name) => name.as_str(),
            Operand::Lookup(lookup) => lookup.key.as_str(),
        })
    }

    /// The sum, when `lookup` knows every term; else the expression with the known terms summed.
    pub fn evaluate<'v>(&self, lookup: &dyn Fn(&str) -> Option<TemplateValue<'v>>) -> Result<Evaluated, String> {
        let mut total = self.offset;
        let mut open = false;
        for term in &self.terms {
            match term.seconds_if_known(lookup) {
                Some(seconds) => {
                    total = total.checked_add(seconds?).ok_or_else(|| "the sum is too large".to_string())?;
                }
                None => open = true,
            }
        }
        if !open {
            return Ok(Evaluated::Seconds(total));
        }
        // Only when the recipe is compiled: tasks know all their dims.
        let terms = self.terms.iter().filter(|term| term.seconds_if_known(lookup).is_none()).cloned().collect();
        Ok(Evaluated::Partial(TimeExpr { text: self.text.clone(), terms, offset: total, format: self.format.clone() }))
    }

    /// Appends the result `seconds` in the expression's format.
    pub fn write(&self, seconds: i64, out: &mut String) -> Result<(), String> {
        match &self.format {
            ExprFormat::Instant(Some(format)) => format.write(seconds, out),
            ExprFormat::Instant(None) => write!(out, "{}", DimValue::Time(seconds)).map_err(|e| e.to_string()),
            ExprFormat::Duration(format) => {
                format.write(seconds, out);
                Ok(())
            }
        }
    }

    /// Most bytes the result formats to.
    pub fn max_len(&self) -> usize {
        match &self.format {
            ExprFormat::Instant(Some(format)) => format.max_len(),
            // A year of up to 19 digits and its sign, then `-MM-DDTHH:MM:SSZ`.
            ExprFormat::Instant(None) => 20 + "-01-01T00:00:00Z".len(),
            ExprFormat::Duration(format) => format.max_len(),
        }
    }

    /// The lookups among the terms (bound by the compiler).
    pub fn lookups_mut(&mut self) -> impl Iterator<Item = &mut Lookup> {
        self.terms.iter_mut().filter_map(|term| match &mut term.operand {
            Operand::Lookup(lookup) => Some(lookup),
            Operand::Name(_) => None,
        })
    }
}

impl Term {
    /// The term's signed seconds, if `lookup` knows its operand.
    pub fn seconds_if_known<'v>(
        &self,
        lookup: &dyn Fn(&str) -> Option<TemplateValue<'v>>,
    ) -> Option<Result<i64, String>> {
        match &self.operand {
            Operand::Name(name) => lookup(name).map(|value| self.seconds(&value)),
            Operand::Lookup(table) => table.resolve(lookup).map(|entry| self.seconds(&TemplateValue::Json(entry))),
        }
    }

    /// The term's signed seconds for the operand's value `value`: a number of its unit, or a
    /// date-time's seconds since the epoch.
    pub fn seconds(&self, value: &TemplateValue<'_>) -> Result<i64, String> {
        let seconds = match self.unit {
            Some(unit) => match value.as_number(true) {
                Some(Number::Int(i)) => i.checked_mul(unit.seconds()),
                Some(Number::Float(f)) => {
                    let seconds = f * unit.seconds() as f64;
                    if seconds.fract() != 0.0 {
                        return Err(format!(
                            "`{}` is {f} {}, not a whole number of seconds; expected whole seconds",
                            self.written(),
                            unit_name(unit)
                        ));
                    }
                    // Beyond ±2^63 the conversion saturates: caught by the bounds check.
                    (seconds.abs() < 9.2e18).then_some(seconds as i64)
                }
                None => {
                    return Err(format!(
                        "`{}` needs a number before the unit, but `{}` is `{}`; expected a number, or no unit for a date-time",
                        self.written(),
                        self.operand_text(),
                        super::diagnostic::shorten(&value.text(), 40)
                    ));
                }
            }
            .ok_or_else(|| format!("`{}` is too long a duration", self.written()))?,
            None => value.as_instant().ok_or_else(|| {
                let operand = self.operand_text();
                let or = if operand == "cycle" {
                    " (the cycle id, `--cycle`, must be one for date-time arithmetic)".to_string()
                } else {
                    format!(", or a unit after it for a duration (`{operand} h`)")
                };
                format!(
                    "`{operand}` is `{}`, which is not a date-time; expected {INSTANT_FORMS}{or}",
                    super::diagnostic::shorten(&value.text(), 40)
                )
            })?,
        };
        Ok(if self.negative { -seconds } else { seconds })
    }

    /// The operand as written: `lead`, `radii[lead]`.
    pub fn operand_text(&self) -> String {
        match &self.operand {
            Operand::Name(name) => name.clone(),
            Operand::Lookup(lookup) => format!("{}[{}]", lookup.table, lookup.key),
        }
    }

    /// The term as written: `lead h`.
    pub fn written(&self) -> String {
        match self.unit {
            Some(unit) => format!("{} {}", self.operand_text(), unit_letter(unit)),
            None => self.operand_text(),
        }
    }
}

fn unit_letter(unit: Unit) -> char {
    match unit {
        Unit::Second => 's',
        Unit::Minute => 'm',
        Unit::Hour => 'h',
        Unit::Day => 'd',
    }
}

fn unit_name(unit: Unit) -> &'static str {
    match unit {
        Unit::Second => "seconds",
        Unit::Minute => "minutes",
        Unit::Hour => "hours",
        Unit::Day => "days",
    }
}

enum Parsed {
    /// A number, and the unit written on it (`6h`).
    Number(i64, Option<Unit>),
    Operand(Operand),
}

fn parse_operand(word: &str) -> Result<Parsed, String> {
    if word.starts_with(|c: char| c.is_ascii_digit()) {
        let digits = word.bytes().take_while(u8::is_ascii_digit).count();
        let number = word[..digits].parse::<i64>().map_err(|_| format!("`{word}` is too large a number"))?;
        return match &word[digits..] {
            "" => Ok(Parsed::Number(number, None)),
            unit => match Unit::parse(unit) {
                Some(unit) => Ok(Parsed::Number(number, Some(unit))),
                None => Err(format!("`{word}` is not a number with a unit {}", Unit::WRITTEN)),
            },
        };
    }
    if let Some(lookup) = Lookup::parse(word) {
        return lookup.map(|l| Parsed::Operand(Operand::Lookup(l)));
    }
    if word.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-') {
        return Ok(Parsed::Operand(Operand::Name(word.to_string())));
    }
    Err(format!("`{word}` is not a name, a lookup or a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str, format: Option<&str>) -> TimeExpr {
        TimeExpr::parse(text, format).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn sum(expr: &TimeExpr, lookup: &dyn Fn(&str) -> Option<TemplateValue<'static>>) -> i64 {
        match expr.evaluate(lookup).unwrap() {
            Evaluated::Seconds(s) => s,
            Evaluated::Partial(rest) => panic!("open: {rest:?}"),
        }
    }

    #[test]
    fn kinds_follow_from_how_it_is_written() {
        assert!(parsed("cycle + lead h", None).is_instant());
        assert!(parsed("cycle - 6h", None).is_instant());
        assert!(!parsed("lead h", None).is_instant());
        assert!(!parsed("valid - cycle", None).is_instant());
        assert!(!parsed("6h + 30 m", None).is_instant());
        assert_eq!(parsed("6h + 30 m - 1d", None).offset, 6 * 3600 + 1800 - 86_400);
        let expr = parsed("cycle + radii[ lead ] m - my-lag h", None);
        let names: Vec<&str> = expr.names().collect();
        assert_eq!(names, ["cycle", "lead", "my-lag"]);
    }

    #[test]
    fn sums_and_partial_sums() {
        let expr = parsed("cycle + lead h - 30m", Some("%Y%m%dT%H%MZ"));
        let cycle = |name: &str| (name == "cycle").then_some(TemplateValue::Text("2026-12-01T00Z"));
        let Evaluated::Partial(rest) = expr.evaluate(&cycle).unwrap() else { panic!("lead is open") };
        assert_eq!(rest.terms.len(), 1);
        let lead = |name: &str| (name == "lead").then_some(TemplateValue::Dim(DimValue::Int(3)));
        let seconds = sum(&rest, &lead);
        let mut out = String::new();
        rest.write(seconds, &mut out).unwrap();
        assert_eq!(out, "20261201T0230Z");
        let lead_only = parsed("lead h", Some("PT%4HH%MM"));
        let mut out = String::new();
        lead_only.write(sum(&lead_only, &lead), &mut out).unwrap();
        assert_eq!(out, "PT0003H00M");
        let half = |_: &str| Some(TemplateValue::Json(&*Box::leak(Box::new(serde_json::json!(1.5)))));
        assert_eq!(sum(&parsed("x h", None), &half), 5400);
    }

    #[test]
    fn misuse_is_explained() {
        for (text, format, says) in [
            ("cycle + lead", None, "adds two date-times (cycle, lead)"),
            ("6h - cycle", None, "subtracts more date-times than it adds (cycle)"),
            ("cycle + 6", None, "the number 6 needs a unit"),
            ("cycle + + 6h", None, "two operators in a row"),
            ("cycle +", None, "ends with an operator"),
            ("cycle lead h", None, "`lead` follows `cycle`"),
            ("cycle + 6hours", None, "`6hours` is not a number with a unit"),
            ("cycle + 6h h", None, "`6h` has two units"),
            ("cycle + lead h", Some("03"), "it is a date-time; expected a strftime format"),
            ("lead h", Some("%Y"), "is a duration: bad duration format `%Y`"),
            ("cycle + 99999999999999999999h", None, "too large a number"),
            ("cycle + 9223372036854775807h", None, "too long a duration"),
        ] {
            let error = TimeExpr::parse(text, format).unwrap_err();
            assert!(error.contains(says), "{text}: {error}");
        }
        let expr = parsed("cycle + lead h", None);
        let values = |name: &str| match name {
            "cycle" => Some(TemplateValue::Text("C1")),
            _ => Some(TemplateValue::Text("three")),
        };
        let error = expr.evaluate(&values).unwrap_err();
        assert!(error.starts_with("`cycle` is `C1`, which is not a date-time"), "{error}");
        let error = parsed("lead h", None).evaluate(&values).unwrap_err();
        assert!(error.starts_with("`lead h` needs a number before the unit, but `lead` is `three`"), "{error}");
    }
}
