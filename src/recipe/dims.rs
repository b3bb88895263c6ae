//! Named index dimensions. A dim is a rule for its values, never a materialised list unless the
//! recipe lists them, so a dim of 10⁶ values (or dates) costs a few bytes.

use runner_plugin::DimValue;

/// Position of a dim in the recipe's `dims`.
pub type DimId = usize;

/// One dimension.
#[derive(Debug, Clone)]
pub struct Dim {
    pub name: String,
    pub values: DimValues,
}

/// The values of a dim.
#[derive(Debug, Clone)]
pub enum DimValues {
    /// `start, start + step, ...` (`n` is `{start: 0, step: 1, len: n}`).
    Range { start: i64, step: i64, len: u64 },
    /// Values listed in the recipe.
    List(Vec<DimValue>),
    /// Consecutive blocks of `size` values of dim `of`; the value is the block number.
    Group { of: DimId, size: u64, len: u64 },
    /// Dates or times `start, start + step, ...` in seconds since the epoch (UTC); values are
    /// [`DimValue::Date`]s when `dates` (whole days), else [`DimValue::Time`]s.
    Time { start: i64, step: i64, len: u64, dates: bool },
}

impl Dim {
    pub fn len(&self) -> u64 {
        match &self.values {
            DimValues::Range { len, .. } | DimValues::Group { len, .. } | DimValues::Time { len, .. } => *len,
            DimValues::List(values) => values.len() as u64,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value at position `index` (< `len()`).
    pub fn value(&self, index: u64) -> DimValue {
        match &self.values {
            // The value lies between the range's start and stop, so wrapping arithmetic gives it
            // even when `step * index` alone would not fit in an i64.
            DimValues::Range { start, step, .. } => DimValue::Int(start.wrapping_add(step.wrapping_mul(index as i64))),
            DimValues::List(values) => values[index as usize].clone(),
            DimValues::Group { .. } => DimValue::Int(index as i64),
            // Checked at compile time: every value lies between start and stop.
            DimValues::Time { start, step, dates, .. } => {
                let seconds = start.wrapping_add(step.wrapping_mul(index as i64));
                if *dates { DimValue::Date(seconds) } else { DimValue::Time(seconds) }
            }
        }
    }

    /// Position of `value`, if it is one of the dim's values. Linear in a listed dim's length
    /// (the compiler indexes lists it searches often).
    pub fn position(&self, value: &DimValue) -> Option<u64> {
        let arithmetic = |start: i64, step: i64, len: u64, v: i64| {
            let (offset, step) = (i128::from(v) - i128::from(start), i128::from(step));
            (offset >= 0 && offset % step == 0 && offset / step < i128::from(len)).then(|| (offset / step) as u64)
        };
        match (&self.values, value) {
            (DimValues::Range { start, step, len }, DimValue::Int(v)) => arithmetic(*start, *step, *len, *v),
            (DimValues::Time { start, step, len, .. }, DimValue::Date(v) | DimValue::Time(v)) => {
                arithmetic(*start, *step, *len, *v)
            }
            (DimValues::List(values), _) => values.iter().position(|v| v == value).map(|p| p as u64),
            (DimValues::Group { len, .. }, DimValue::Int(v)) => (*v >= 0 && (*v as u64) < *len).then_some(*v as u64),
            _ => None,
        }
    }

    /// The least and the greatest value, as integers or seconds since the epoch; `None` for a
    /// list that is not all integers. Linear in a listed dim's length.
    pub fn extent(&self) -> Option<(i64, i64)> {
        match &self.values {
            DimValues::Range { start, step, len } | DimValues::Time { start, step, len, .. } => {
                // The last value lies within the range that was compiled: no overflow.
                Some((*start, start.wrapping_add(step.wrapping_mul(len.saturating_sub(1) as i64))))
            }
            DimValues::Group { len, .. } => Some((0, len.saturating_sub(1) as i64)),
            DimValues::List(values) => values.iter().try_fold((i64::MAX, i64::MIN), |(least, most), v| match v {
                DimValue::Int(i) => Some((least.min(*i), most.max(*i))),
                _ => None,
            }),
        }
    }

    /// True when every value is an integer (templates with numeric formats need that).
    pub fn is_integer(&self) -> bool {
        match &self.values {
            DimValues::List(values) => values.iter().all(|v| matches!(v, DimValue::Int(_))),
            DimValues::Time { .. } => false,
            DimValues::Range { .. } | DimValues::Group { .. } => true,
        }
    }

    /// True for a dim of dates or times (templates with strftime formats need that).
    pub fn is_time(&self) -> bool {
        matches!(self.values, DimValues::Time { .. })
    }

    /// What the values are, for messages: "integer", "string", "date"...
    pub fn kind(&self) -> &'static str {
        match &self.values {
            DimValues::Time { dates: true, .. } => "date",
            DimValues::Time { dates: false, .. } => "date-time",
            DimValues::List(values) if !values.iter().all(|v| matches!(v, DimValue::Int(_))) => "string",
            _ => "integer",
        }
    }

    /// The dim this one groups, if it is a group.
    pub fn group_of(&self) -> Option<(DimId, u64)> {
        match self.values {
            DimValues::Group { of, size, .. } => Some((of, size)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_positions() {
        let hours = Dim { name: "hour".into(), values: DimValues::Range { start: 0, step: 3, len: 8 } };
        assert_eq!(hours.value(2), DimValue::Int(6));
        assert_eq!(hours.position(&DimValue::Int(21)), Some(7));
        assert_eq!(hours.position(&DimValue::Int(22)), None);
        assert_eq!(hours.position(&DimValue::Int(24)), None);
        assert_eq!(hours.position(&DimValue::Int(-3)), None);
    }

    #[test]
    fn date_positions() {
        let day = 86_400;
        let days =
            Dim { name: "day".into(), values: DimValues::Time { start: 10 * day, step: day, len: 5, dates: true } };
        assert_eq!(days.value(2), DimValue::Date(12 * day));
        assert_eq!(days.position(&DimValue::Date(14 * day)), Some(4));
        assert_eq!(days.position(&DimValue::Date(15 * day)), None);
        assert_eq!(days.position(&DimValue::Time(12 * day + 1)), None);
        assert_eq!(days.position(&DimValue::Int(12 * day)), None);
        assert!(days.is_time() && !days.is_integer());
        assert_eq!(days.extent(), Some((10 * day, 14 * day)));
    }

    #[test]
    fn extents() {
        let list = |values: Vec<DimValue>| Dim { name: "l".into(), values: DimValues::List(values) };
        assert_eq!(list(vec![DimValue::Int(6), DimValue::Int(-1), DimValue::Int(3)]).extent(), Some((-1, 6)));
        assert_eq!(list(vec![DimValue::Int(6), DimValue::Str(std::sync::Arc::from("x"))]).extent(), None);
        let hours = Dim { name: "hour".into(), values: DimValues::Range { start: 0, step: 3, len: 8 } };
        assert_eq!(hours.extent(), Some((0, 21)));
    }
}
