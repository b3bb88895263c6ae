//! Templates against the recipe, when it is compiled: each reference's name (a dim of the step,
//! a var or `cycle`) and format against the values it can take; lookups' vars and dims, their
//! tables built once per var and dim and bound into the template; date-time arithmetic's terms
//! (kinds, and bounds over every value of the dims in it); and the vars and cycle filled in.
//! Each check returns the longest text the segment can expand to, for the size bound of args.

use std::sync::Arc;

use super::compiler::Compiler;
use super::dims::{DimId, DimValues};
use super::lookup::{Lookup, LookupTable, TableUse};
use super::suggest::suggestion;
use super::template::{Braces, Filled, Format, Segment, Template, TemplateValue, TimeExpr};
use super::template_format::json_len;
use super::time::{Extent, Unit};
use super::time_expr::{Operand, Term};

/// What a name in a template is to a step.
enum StepName {
    /// A dim the step runs over.
    Dim(DimId),
    /// Already reported (a rejected dim or var, unreadable `dims:`/`vars:`): stay silent.
    Tainted,
    /// A dim the step does not run over.
    OtherDim,
    /// A var or `cycle`.
    Fixed,
    Unknown,
}

impl Compiler<'_> {
    /// Parses `text` and binds the tables of its lookups (built on first use).
    pub(super) fn parse_template(&mut self, text: &str) -> Result<Template, String> {
        let mut template = Template::parse(text)?;
        for lookup in template.lookups_mut() {
            lookup.entries = self.table_use(&lookup.table, &lookup.key).and_then(Result::ok).map(|u| u.table.clone());
        }
        Ok(template)
    }

    /// `text` with vars and the cycle filled in (already checked); dims stay. Its text braces
    /// will be written as `braces` says.
    pub(super) fn fixed_template(&mut self, text: &str, braces: Braces) -> Result<Filled, String> {
        let mut template = self.parse_template(text)?;
        template.braces = braces;
        template.fill(&|name| self.fixed_value(name))
    }

    /// The value of a var or of `cycle`, as templates see it at compile time.
    pub(super) fn fixed_value(&self, name: &str) -> Option<TemplateValue<'_>> {
        if name == "cycle" {
            return Some(TemplateValue::Text(&self.options.cycle));
        }
        self.var_ids.get(name).map(|&at| TemplateValue::Json(&self.vars[at].1))
    }

    /// Checks `segment` (not a literal) of a template of step `step` and returns the longest
    /// text it can expand to; `lone` when it is the whole string (it then keeps its type).
    pub(super) fn segment_len(
        &mut self,
        step: &str,
        segment: &Segment,
        lone: bool,
        over: &[DimId],
        over_known: bool,
    ) -> Result<usize, String> {
        match segment {
            Segment::Literal(text) | Segment::Rendered(text) => Ok(text.len()),
            Segment::FileRef(body) => Ok(body.len() + 2),
            Segment::Ref { name, format, .. } => {
                let len = self.reference_len(step, name, format, over, over_known)?;
                Ok(if lone { len } else { format.max_len(len) })
            }
            Segment::Lookup { lookup, format, .. } => self.lookup_len(step, lookup, format, lone, over, over_known),
            Segment::Time(expr) => self.time_len(step, expr, over, over_known),
        }
    }

    fn step_name(&mut self, name: &str, over: &[DimId], over_known: bool) -> StepName {
        if name == "cycle" || self.var_ids.contains_key(name) {
            return StepName::Fixed;
        }
        if self.rejected_vars.contains(name) {
            self.tainted = true;
            return StepName::Tainted;
        }
        match self.dim(name) {
            Err(()) => StepName::Tainted,
            Ok(Some(d)) if over.contains(&d) => StepName::Dim(d),
            _ if !over_known || self.vars_unreadable => {
                self.tainted = true;
                StepName::Tainted
            }
            Ok(Some(_)) => StepName::OtherDim,
            Ok(None) => StepName::Unknown,
        }
    }

    /// "(lead, member)": the dims step `over` runs over, for messages.
    fn runs_over(&self, over: &[DimId]) -> String {
        let names: Vec<&str> = over.iter().map(|&d| self.dims[d].name.as_str()).collect();
        if names.is_empty() { "nothing".to_string() } else { names.join(", ") }
    }

    /// The error for `name`, neither a dim of the step nor a var nor `cycle`.
    fn not_on_step(&self, step: &str, name: &str, known: &StepName, over: &[DimId]) -> String {
        if let StepName::OtherDim = known {
            return format!(
                "`{{{name}}}` refers to dim `{name}`, but step `{step}` does not run over it; expected a dim the step runs over ({}), a var or `cycle`",
                self.runs_over(over)
            );
        }
        let candidates = self
            .vars
            .iter()
            .map(|(v, _)| v.as_str())
            .chain(over.iter().map(|&d| self.dims[d].name.as_str()))
            .chain(["cycle"]);
        let arithmetic = if name.contains('-') { " (arithmetic needs spaces around `-`: `{cycle - 6h}`)" } else { "" };
        format!(
            "unknown name `{{{name}}}` in a template{arithmetic}; expected a dim of the step, a var or `cycle`: {}",
            suggestion(name, candidates)
        )
    }

    /// Checks reference `{name:format}` and returns the longest text its value can have.
    fn reference_len(
        &mut self,
        step: &str,
        name: &str,
        format: &Format,
        over: &[DimId],
        over_known: bool,
    ) -> Result<usize, String> {
        if name == "cycle" {
            return Ok(self.options.cycle.len());
        }
        if let Some(&at) = self.var_ids.get(name) {
            return Ok(json_len(&self.vars[at].1));
        }
        let d = match self.step_name(name, over, over_known) {
            StepName::Dim(d) => d,
            StepName::Tainted | StepName::Fixed => return Ok(0),
            other => return Err(self.not_on_step(step, name, &other, over)),
        };
        let dim = &self.dims[d];
        if format.needs_number() && !dim.is_integer() {
            let date_format =
                if dim.is_time() { format!(", or a date format such as `{{{name}:%Y%m%d}}`") } else { String::new() };
            return Err(format!(
                "`{{{name}}}` has a numeric format but dim `{name}` has {} values; expected `{{{name}}}` or a width alone, e.g. `{{{name}:8}}`{date_format}",
                dim.kind()
            ));
        }
        if format.is_time() && !dim.is_time() {
            return Err(format!(
                "`{{{name}}}` has a date format but dim `{name}` has {} values; expected a date dim (`{{start: 1981-09-01, stop: 2021-01-05, step: 1d}}`) or a format such as `03`",
                dim.kind()
            ));
        }
        Ok(self.value_len(d))
    }

    /// Longest text of a value of dim `d` (computed once per dim: linear in a list's length).
    pub(super) fn value_len(&mut self, d: DimId) -> usize {
        if let Some(&len) = self.value_lens.get(&d) {
            return len;
        }
        let dim = &self.dims[d];
        let len = match &dim.values {
            DimValues::List(values) => values.iter().map(|v| v.to_string().len()).max().unwrap_or(0),
            DimValues::Time { .. } => "2026-11-01T03:00:00Z".len(),
            // Integers print at most 20 characters.
            DimValues::Range { .. } | DimValues::Group { .. } => 20,
        };
        self.value_lens.insert(d, len);
        len
    }

    /// The table of var `table` by dim `key`, built on first use; `None` when either is not
    /// one (which the checks report).
    fn table_use(&mut self, table: &str, key: &str) -> Option<Result<&mut TableUse, String>> {
        let var = *self.var_ids.get(table)?;
        let dim = *self.dim_ids.get(key)?;
        if !self.lookup_tables.contains_key(&(var, dim)) {
            let built = LookupTable::build(table, &self.vars[var].1, &self.dims[dim]).map(|t| TableUse {
                table: Arc::new(t),
                lens: Vec::new(),
                extents: Vec::new(),
            });
            self.lookup_tables.insert((var, dim), built);
        }
        self.lookup_tables.get_mut(&(var, dim)).map(|built| built.as_mut().map_err(|e| e.clone()))
    }

    /// Checks that `lookup` indexes a var by a dim of the step; its table, or `None` when a
    /// problem reported elsewhere hides the answer.
    fn checked_table(
        &mut self,
        step: &str,
        lookup: &Lookup,
        over: &[DimId],
        over_known: bool,
    ) -> Result<Option<&mut TableUse>, String> {
        let Lookup { table, key, .. } = lookup;
        let written = format!("{{{table}[{key}]}}");
        if !self.var_ids.contains_key(table) {
            if self.rejected_vars.contains(table) || self.vars_unreadable {
                self.tainted = true;
                return Ok(None);
            }
            let what = if self.dim_ids.contains_key(table) || self.rejected_dims.contains(table) {
                format!("`{table}` is a dim, not a var")
            } else if table == "cycle" {
                "`cycle` is not a var".to_string()
            } else {
                format!("unknown var `{table}`")
            };
            return Err(format!(
                "`{written}`: {what}; expected a var that maps the values of `{key}` to values, {}",
                suggestion(table, self.vars.iter().map(|(v, _)| v.as_str()))
            ));
        }
        match self.step_name(key, over, over_known) {
            StepName::Dim(_) => {}
            StepName::Tainted => return Ok(None),
            known => {
                let what = match known {
                    StepName::OtherDim => format!("a dim that step `{step}` does not run over"),
                    StepName::Fixed => "a var, not a dim".to_string(),
                    _ => "not a dim of the recipe".to_string(),
                };
                return Err(format!(
                    "`{written}` indexes var `{table}` by `{key}`, which is {what}; expected a dim the step runs over ({})",
                    self.runs_over(over)
                ));
            }
        }
        match self.table_use(table, key) {
            Some(Ok(found)) => Ok(Some(found)),
            Some(Err(e)) => Err(format!("`{written}`: {e}")),
            None => Ok(None),
        }
    }

    /// Checks lookup `{table[key]:format}` and returns the longest text of its entries.
    fn lookup_len(
        &mut self,
        step: &str,
        lookup: &Lookup,
        format: &Format,
        lone: bool,
        over: &[DimId],
        over_known: bool,
    ) -> Result<usize, String> {
        let Some(found) = self.checked_table(step, lookup, over, over_known)? else { return Ok(0) };
        if let Some((_, len)) = found.lens.iter().find(|((f, l), _)| f == format && *l == lone) {
            return len.clone();
        }
        let mut longest = Ok(0);
        let mut text = String::new();
        for (value, entry) in found.table.entries() {
            text.clear();
            if let Err(e) = TemplateValue::Json(entry).format(format, &mut text) {
                longest = Err(format!("`{{{}[{}]}}` for {} `{value}`: {e}", lookup.table, lookup.key, lookup.key));
                break;
            }
            let len = if lone { json_len(entry) } else { text.len() };
            longest = longest.map(|l: usize| l.max(len));
        }
        found.lens.push(((format.clone(), lone), longest.clone()));
        longest
    }

    /// Checks date-time arithmetic: every term's name, that dims before a unit are integers
    /// and those without one date-times, the vars and cycle in it, and that the result stays
    /// within what can be formatted for every value of its dims. Returns its longest text.
    fn time_len(&mut self, step: &str, expr: &TimeExpr, over: &[DimId], over_known: bool) -> Result<usize, String> {
        let context = |e: String| format!("`{{{}}}`: {e}", expr.text);
        // The least and most the sum can be, term by term (as a task adds them).
        let (mut low, mut high) = (i128::from(expr.offset), i128::from(expr.offset));
        for term in &expr.terms {
            let extent = match &term.operand {
                Operand::Name(name) => self.name_extent(step, name, term, over, over_known),
                Operand::Lookup(lookup) => self.lookup_extent(step, lookup, term, over, over_known),
            };
            let Some((least, most)) = extent.map_err(context)? else { continue };
            let (least, most) =
                if term.negative { (-i128::from(most), -i128::from(least)) } else { (least.into(), most.into()) };
            (low, high) = (low + least, high + most);
            if low < i128::from(i64::MIN) || high > i128::from(i64::MAX) {
                return Err(context(format!(
                    "the sum can reach {} seconds; expected at most 2^63",
                    low.abs().max(high)
                )));
            }
        }
        if expr.is_instant() {
            let formattable = |s: i128| chrono::DateTime::from_timestamp(s as i64, 0).is_some();
            if !formattable(low) || !formattable(high) {
                return Err(context(format!(
                    "its date-times reach {} seconds from 1970; expected dates within years -262143 to 262142",
                    if formattable(low) { high } else { low }
                )));
            }
        }
        Ok(expr.max_len())
    }

    /// Least and most seconds a term over name `name` adds (before its sign); `None` when
    /// that is not known (a problem reported elsewhere).
    fn name_extent(
        &mut self,
        step: &str,
        name: &str,
        term: &Term,
        over: &[DimId],
        over_known: bool,
    ) -> Result<Option<(i64, i64)>, String> {
        let known = self.step_name(name, over, over_known);
        let d = match known {
            StepName::Dim(d) => d,
            StepName::Tainted => return Ok(None),
            StepName::Fixed => {
                let Some(value) = self.fixed_value(name) else { return Ok(None) };
                let unsigned = Term { negative: false, ..term.clone() };
                return unsigned.seconds(&value).map(|s| Some((s, s)));
            }
            other => return Err(self.not_on_step(step, name, &other, over)),
        };
        let dim = &self.dims[d];
        match term.unit {
            Some(_) if !dim.is_integer() => Err(format!(
                "`{}` needs a number before the unit, but dim `{name}` has {} values; expected an integer dim{}",
                term.written(),
                dim.kind(),
                if dim.is_time() { format!(", or `{name}` without a unit (a date-time)") } else { String::new() }
            )),
            None if !dim.is_time() => Err(format!(
                "dim `{name}` has {} values, which are not date-times; expected `{name} h` (or `m`, `s`, `d`) for a duration of that many hours, or a date or date-time dim",
                dim.kind()
            )),
            unit => {
                let Some((least, most)) = dim.extent() else { return Ok(None) };
                let per = i128::from(unit.map_or(1, Unit::seconds));
                let fits = |v: i128| i64::try_from(v).ok();
                match (fits(i128::from(least) * per), fits(i128::from(most) * per)) {
                    (Some(least), Some(most)) => Ok(Some((least, most))),
                    _ => Err(format!("`{}` can be too long a duration for dim `{name}`'s values", term.written())),
                }
            }
        }
    }

    /// Least and most seconds a term over a lookup adds, over every entry of its table.
    fn lookup_extent(
        &mut self,
        step: &str,
        lookup: &Lookup,
        term: &Term,
        over: &[DimId],
        over_known: bool,
    ) -> Result<Option<(i64, i64)>, String> {
        let Some(found) = self.checked_table(step, lookup, over, over_known)? else { return Ok(None) };
        if let Some((_, extent)) = found.extents.iter().find(|(unit, _)| *unit == term.unit) {
            return extent.clone().map(Some);
        }
        let unsigned = Term { negative: false, ..term.clone() };
        let mut extent: Extent = Ok((i64::MAX, i64::MIN));
        for (value, entry) in found.table.entries() {
            match unsigned.seconds(&TemplateValue::Json(entry)) {
                Ok(s) => extent = extent.map(|(least, most)| (least.min(s), most.max(s))),
                Err(e) => {
                    extent = Err(format!("for {} `{value}`: {e}", lookup.key));
                    break;
                }
            }
        }
        found.extents.push((term.unit, extent.clone()));
        extent.map(Some)
    }
}
