//! The recipe file as written: serde types that keep every node's location, so that each later
//! check can point at the exact line and column.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// Visitor methods that reject a scalar of the wrong kind with a custom error: the parser points
/// a custom error at the value itself, but a type error at the key above it.
macro_rules! reject_scalars {
    ($($method:ident($ty:ty) => $unexpected:ident),* $(,)?) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<Self::Value, E> {
                Err(E::custom(format_args!("invalid type: {}, expected {}", de::Unexpected::$unexpected(v), &self as &dyn de::Expected)))
            }
        )*
    };
}

/// `reject_scalars!` for every kind of scalar, and for an empty value.
macro_rules! reject_all_scalars {
    () => {
        reject_scalars!(visit_bool(bool) => Bool, visit_i64(i64) => Signed, visit_u64(u64) => Unsigned, visit_f64(f64) => Float, visit_str(&str) => Str);
        reject_unit!();
    };
}

macro_rules! reject_unit {
    () => {
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Err(E::custom(format_args!("empty value, expected {}", &self as &dyn de::Expected)))
        }
    };
}

/// A YAML mapping read in file order, with each key's location.
#[derive(Debug)]
pub struct OrderedMap<V>(pub Vec<(Spanned<String>, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MapVisitor<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for MapVisitor<V> {
            type Value = OrderedMap<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping (`key: value` entries)")
            }
            reject_scalars!(visit_bool(bool) => Bool, visit_i64(i64) => Signed, visit_u64(u64) => Unsigned, visit_f64(f64) => Float, visit_str(&str) => Str);
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(OrderedMap(Vec::new()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, _seq: A) -> Result<Self::Value, A::Error> {
                Err(de::Error::custom(format_args!("invalid type: sequence, expected {}", &self as &dyn de::Expected)))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = access.next_key::<Spanned<String>>()? {
                    entries.push((key, access.next_value()?));
                }
                Ok(OrderedMap(entries))
            }
        }
        deserializer.deserialize_any(MapVisitor(PhantomData))
    }
}

/// Top level of a recipe file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRecipe {
    /// Required; optional here so that its absence is reported with a useful location.
    #[serde(default)]
    pub recipe: Option<Spanned<String>>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub dims: Option<Spanned<OrderedMap<Spanned<RawDim>>>>,
    #[serde(default)]
    pub vars: Option<Spanned<OrderedMap<Spanned<serde_json::Value>>>>,
    /// Required, as `recipe`.
    #[serde(default)]
    pub steps: Option<Spanned<OrderedMap<Spanned<RawStep>>>>,
}

/// A dim as written: a count, a list, a range or a group.
#[derive(Debug)]
pub enum RawDim {
    Count(i64),
    List(Vec<Spanned<Scalar>>),
    Range(RawRange),
    Group(RawGroup),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRange {
    pub start: Spanned<i64>,
    pub stop: Spanned<i64>,
    #[serde(default)]
    pub step: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGroup {
    pub group: Spanned<String>,
    pub size: Spanned<i64>,
}

/// An integer or a string, as dim values are.
#[derive(Debug, Clone)]
pub enum Scalar {
    Int(i64),
    Str(String),
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl Visitor<'_> for ScalarVisitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer or a string")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar::Int(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                i64::try_from(v).map(Scalar::Int).map_err(|_| E::custom("integer too large"))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Str(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar::Str(v.to_string()))
            }
            reject_scalars!(visit_f64(f64) => Float);
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

impl<'de> Deserialize<'de> for RawDim {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DimVisitor;
        impl<'de> Visitor<'de> for DimVisitor {
            type Value = RawDim;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a dim: a count (`12`), a list (`[1, 2, 3]`), a range (`{start: 0, stop: 23}`) \
                     or a group (`{group: hour, size: 6}`)",
                )
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawDim, E> {
                Ok(RawDim::Count(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawDim, E> {
                i64::try_from(v).map(RawDim::Count).map_err(|_| E::custom("dim count too large"))
            }
            reject_scalars!(visit_bool(bool) => Bool, visit_f64(f64) => Float, visit_str(&str) => Str);
            reject_unit!();
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawDim, A::Error> {
                let mut values = Vec::new();
                while let Some(v) = seq.next_element::<Spanned<Scalar>>()? {
                    values.push(v);
                }
                Ok(RawDim::List(values))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawDim, A::Error> {
                // Decide between range and group by the keys, then let serde check the rest.
                let entries: OrderedMap<Spanned<serde_json::Value>> =
                    Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let is_group = entries.0.iter().any(|(k, _)| k.value == "group");
                dim_from_entries(entries, is_group).map_err(de::Error::custom)
            }
        }
        deserializer.deserialize_any(DimVisitor)
    }
}

/// Builds a range or group from already-read entries, keeping each value's location.
fn dim_from_entries(entries: OrderedMap<Spanned<serde_json::Value>>, is_group: bool) -> Result<RawDim, String> {
    let allowed: &[&str] = if is_group { &["group", "size"] } else { &["start", "stop", "step"] };
    let int_field = |name: &str| -> Result<Option<Spanned<i64>>, String> {
        let Some((_, value)) = entries.0.iter().find(|(k, _)| k.value == name) else {
            return Ok(None);
        };
        let number = value.value.as_i64().ok_or_else(|| format!("`{name}` is {}; expected an integer", value.value))?;
        Ok(Some(Spanned::new(number, value.referenced, value.defined)))
    };
    for (key, _) in &entries.0 {
        if !allowed.contains(&key.value.as_str()) {
            return Err(format!("unknown key `{}` in a dim; expected one of: {}", key.value, allowed.join(", ")));
        }
    }
    if is_group {
        let size = int_field("size")?
            .ok_or("a group dim without `size`; expected `{group: DIM, size: N}`, e.g. `{group: hour, size: 6}`")?;
        let (_, group) = entries.0.iter().find(|(k, _)| k.value == "group").expect("is_group");
        let name =
            group.value.as_str().ok_or_else(|| format!("`group` is {}; expected the name of a dim", group.value))?;
        Ok(RawDim::Group(RawGroup { group: Spanned::new(name.to_string(), group.referenced, group.defined), size }))
    } else {
        let start = int_field("start")?
            .ok_or("a range dim without `start`; expected `{start: N, stop: M}`, e.g. `{start: 0, stop: 23}`")?;
        let stop = int_field("stop")?
            .ok_or("a range dim without `stop`; expected `{start: N, stop: M}`, e.g. `{start: 0, stop: 23}`")?;
        Ok(RawDim::Range(RawRange { start, stop, step: int_field("step")? }))
    }
}

/// A step as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStep {
    /// Required, as `recipe`.
    #[serde(default)]
    pub plugin: Option<Spanned<String>>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub over: Option<Spanned<DimNames>>,
    #[serde(default)]
    pub inputs: Option<Spanned<RawInputs>>,
    #[serde(default)]
    pub args: Option<Spanned<OrderedMap<Spanned<serde_json::Value>>>>,
    #[serde(default)]
    pub memory: Option<Spanned<Scalar>>,
}

/// `over:`, a list of dim names.
#[derive(Debug, Default)]
pub struct DimNames(pub Vec<Spanned<String>>);

impl<'de> Deserialize<'de> for DimNames {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NamesVisitor;
        impl<'de> Visitor<'de> for NamesVisitor {
            type Value = DimNames;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of dims, e.g. `[member, lead]`")
            }
            reject_all_scalars!();
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DimNames, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<Spanned<String>>()? {
                    names.push(name);
                }
                Ok(DimNames(names))
            }
        }
        deserializer.deserialize_any(NamesVisitor)
    }
}

/// `inputs:` as a map of name → step (or `{step, select}`), or a list of step names.
#[derive(Debug)]
pub enum RawInputs {
    Map(OrderedMap<Spanned<RawInput>>),
    List(Vec<Spanned<String>>),
}

impl<'de> Deserialize<'de> for RawInputs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct InputsVisitor;
        impl<'de> Visitor<'de> for InputsVisitor {
            type Value = RawInputs;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("inputs as a map (`{field: load}`) or a list of steps (`[load, mask]`)")
            }
            reject_all_scalars!();
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawInputs, A::Error> {
                let mut steps = Vec::new();
                while let Some(step) = seq.next_element::<Spanned<String>>()? {
                    steps.push(step);
                }
                Ok(RawInputs::List(steps))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<RawInputs, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = access.next_key::<Spanned<String>>()? {
                    entries.push((key, access.next_value()?));
                }
                Ok(RawInputs::Map(OrderedMap(entries)))
            }
        }
        deserializer.deserialize_any(InputsVisitor)
    }
}

/// One input: a step name, or a step with pinned producer dims.
#[derive(Debug)]
pub enum RawInput {
    Step(String),
    Select { step: Spanned<String>, select: Option<Spanned<OrderedMap<Spanned<Scalar>>>> },
}

impl<'de> Deserialize<'de> for RawInput {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Selected {
            step: Spanned<String>,
            #[serde(default)]
            select: Option<Spanned<OrderedMap<Spanned<Scalar>>>>,
        }
        struct InputVisitor;
        impl<'de> Visitor<'de> for InputVisitor {
            type Value = RawInput;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a step name, or `{step: NAME, select: {DIM: VALUE}}`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawInput, E> {
                Ok(RawInput::Step(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawInput, A::Error> {
                let selected: Selected = Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(RawInput::Select { step: selected.step, select: selected.select })
            }
        }
        deserializer.deserialize_any(InputVisitor)
    }
}
