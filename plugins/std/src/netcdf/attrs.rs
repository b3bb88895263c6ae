//! netCDF attribute values ↔ JSON, and the layout of the array attributes that carry a
//! variable's netCDF metadata between `read_netcdf`, `write_netcdf` and the Zarr plugins.
//!
//! An attribute becomes the JSON value a reader expects (a string, a number, or a list of
//! numbers when there are several); its netCDF type is recorded beside it in an `attr_types`
//! map only when JSON alone would not bring it back (anything but text, `int` and `double`), so
//! a round trip keeps `valid_min` a `short` and `scale_factor` a `float`. Non-finite floats are
//! the strings `"NaN"`, `"Infinity"` and `"-Infinity"` (JSON has no such numbers).

use netcdf_reader::NcAttrValue;
use runner_plugin::serde_json::{Map, Number, Value as Json};

/// The array attribute naming the variable.
pub const VARIABLE: &str = "variable";
/// The array attribute listing the variable's dim names, outermost first.
pub const DIMS: &str = "dims";
/// The variable's own attributes (CF `units`, `long_name`...), without the packing ones.
pub const ATTRS: &str = "attrs";
/// netCDF types of `attrs` that JSON does not say.
pub const ATTR_TYPES: &str = "attr_types";
/// How the variable is stored in the file: `dtype`, `scale_factor`, `add_offset`,
/// `_FillValue`, `missing_value` and the type of the packing attributes (`packing_type`).
pub const ENCODING: &str = "encoding";
/// Coordinate variables by name: `{dims, dtype, values, attrs, attr_types}`.
pub const COORDS: &str = "coords";
/// The file's global attributes.
pub const GLOBAL_ATTRS: &str = "global_attrs";
/// netCDF types of `global_attrs` that JSON does not say.
pub const GLOBAL_ATTR_TYPES: &str = "global_attr_types";

/// Every array attribute the layout reserves; other attributes of an array (say `thresholds`
/// from `threshold`) are written as attributes of the variable.
pub const RESERVED: &[&str] = &[VARIABLE, DIMS, ATTRS, ATTR_TYPES, ENCODING, COORDS, GLOBAL_ATTRS, GLOBAL_ATTR_TYPES];

/// An attribute as JSON, and its type name when JSON does not imply it.
pub fn to_json(value: &NcAttrValue) -> Option<(Json, Option<&'static str>)> {
    fn numbers<T: Copy>(values: &[T], convert: impl Fn(T) -> Json) -> Json {
        match values {
            [one] => convert(*one),
            many => Json::Array(many.iter().map(|&v| convert(v)).collect()),
        }
    }
    let int = |v: i64| Json::from(v);
    Some(match value {
        NcAttrValue::Chars(text) => (Json::String(text.clone()), None),
        NcAttrValue::Strings(texts) => match texts.as_slice() {
            [one] => (Json::String(one.clone()), None),
            many => (Json::Array(many.iter().cloned().map(Json::String).collect()), Some("strings")),
        },
        NcAttrValue::Bytes(v) => (numbers(v, |x| int(x.into())), Some("i8")),
        NcAttrValue::UBytes(v) => (numbers(v, |x| int(x.into())), Some("u8")),
        NcAttrValue::Shorts(v) => (numbers(v, |x| int(x.into())), Some("i16")),
        NcAttrValue::UShorts(v) => (numbers(v, |x| int(x.into())), Some("u16")),
        NcAttrValue::Ints(v) => (numbers(v, |x| int(x.into())), None),
        NcAttrValue::UInts(v) => (numbers(v, |x| int(x.into())), Some("u32")),
        NcAttrValue::Int64s(v) => (numbers(v, int), Some("i64")),
        NcAttrValue::UInt64s(v) => (numbers(v, Json::from), Some("u64")),
        NcAttrValue::Floats(v) => (numbers(v, float32), Some("f32")),
        NcAttrValue::Doubles(v) => (numbers(v, float), None),
        NcAttrValue::UserDefined { .. } => return None,
    })
}

/// A float as JSON: a number, or a string for the values JSON has no number for.
pub fn float(value: f64) -> Json {
    match Number::from_f64(value) {
        Some(n) => Json::Number(n),
        None if value.is_nan() => Json::String("NaN".into()),
        None if value > 0.0 => Json::String("Infinity".into()),
        None => Json::String("-Infinity".into()),
    }
}

/// An f32 as JSON: the shortest decimal that reads back as the same f32 (`0.01`, not the
/// `0.009999999776482582` its exact value would print as f64).
pub fn float32(value: f32) -> Json {
    match value.to_string().parse::<f64>() {
        Ok(shortest) if value.is_finite() => float(shortest),
        _ => float(value.into()),
    }
}

/// A JSON number (or one of the strings [`float`] writes) as a float.
pub fn as_float(value: &Json) -> Option<f64> {
    match value {
        Json::Number(n) => n.as_f64(),
        Json::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            other => other.trim().parse().ok(),
        },
        Json::Null => Some(f64::NAN),
        _ => None,
    }
}

/// Converts a JSON attribute back to a netCDF value of type `type_name` (or the type JSON
/// implies: text, `int` for whole numbers that fit, else `double`). Objects and booleans,
/// which netCDF cannot hold, become their JSON text.
pub fn from_json(name: &str, value: &Json, type_name: Option<&str>) -> Result<NcAttrValue, String> {
    let items: Vec<&Json> = match value {
        Json::Array(items) => items.iter().collect(),
        one => vec![one],
    };
    let floats = || -> Result<Vec<f64>, String> {
        items.iter().map(|v| as_float(v).ok_or_else(|| format!("attribute `{name}`: {v} is not a number"))).collect()
    };
    let ints = || -> Result<Vec<i128>, String> {
        items
            .iter()
            .map(|v| match v {
                Json::Number(n) => n
                    .as_i64()
                    .map(i128::from)
                    .or_else(|| n.as_u64().map(i128::from))
                    .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i128)),
                Json::String(s) => s.trim().parse().ok(),
                _ => None,
            })
            .map(|v| v.ok_or_else(|| format!("attribute `{name}`: {value} is not a list of whole numbers")))
            .collect()
    };
    fn narrow<T: TryFrom<i128>>(name: &str, values: Vec<i128>, type_name: &str) -> Result<Vec<T>, String> {
        values
            .into_iter()
            .map(|v| T::try_from(v).map_err(|_| format!("attribute `{name}`: {v} does not fit in {type_name}")))
            .collect()
    }
    Ok(match type_name {
        Some("f32") => NcAttrValue::Floats(floats()?.into_iter().map(|v| v as f32).collect()),
        Some("f64") => NcAttrValue::Doubles(floats()?),
        Some("i8") => NcAttrValue::Bytes(narrow(name, ints()?, "i8")?),
        Some("u8") => NcAttrValue::UBytes(narrow(name, ints()?, "u8")?),
        Some("i16") => NcAttrValue::Shorts(narrow(name, ints()?, "i16")?),
        Some("u16") => NcAttrValue::UShorts(narrow(name, ints()?, "u16")?),
        Some("i32") => NcAttrValue::Ints(narrow(name, ints()?, "i32")?),
        Some("u32") => NcAttrValue::UInts(narrow(name, ints()?, "u32")?),
        Some("i64") => NcAttrValue::Int64s(narrow(name, ints()?, "i64")?),
        Some("u64") => NcAttrValue::UInt64s(narrow(name, ints()?, "u64")?),
        Some("strings") => NcAttrValue::Strings(items.iter().map(|v| text_of(v)).collect()),
        Some(other) => return Err(format!("attribute `{name}`: unknown netCDF type `{other}`")),
        None => implied(name, value, &items)?,
    })
}

/// The type JSON implies for an attribute without a recorded type.
fn implied(name: &str, value: &Json, items: &[&Json]) -> Result<NcAttrValue, String> {
    if let Json::String(text) = value {
        return Ok(NcAttrValue::Chars(text.clone()));
    }
    if !items.is_empty() && items.iter().all(|v| v.is_string()) {
        return Ok(NcAttrValue::Strings(items.iter().map(|v| text_of(v)).collect()));
    }
    if !items.is_empty() && items.iter().all(|v| v.is_number()) {
        let ints: Option<Vec<i32>> = items.iter().map(|v| v.as_i64().and_then(|i| i32::try_from(i).ok())).collect();
        return Ok(match ints {
            Some(ints) => NcAttrValue::Ints(ints),
            None => NcAttrValue::Doubles(items.iter().filter_map(|v| v.as_f64()).collect()),
        });
    }
    match value {
        Json::Null => Err(format!("attribute `{name}` is null")),
        other => Ok(NcAttrValue::Chars(other.to_string())),
    }
}

fn text_of(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Attributes as a JSON map plus the map of types JSON does not imply.
pub fn map_of<'a>(attrs: impl Iterator<Item = (&'a str, &'a NcAttrValue)>) -> (Map<String, Json>, Map<String, Json>) {
    let (mut values, mut types) = (Map::new(), Map::new());
    for (name, value) in attrs {
        if let Some((json, type_name)) = to_json(value) {
            values.insert(name.to_string(), json);
            if let Some(type_name) = type_name {
                types.insert(name.to_string(), Json::String(type_name.into()));
            }
        }
    }
    (values, types)
}

#[cfg(test)]
mod tests {
    use super::*;
    use runner_plugin::serde_json::json;

    #[test]
    fn every_type_comes_back() {
        let cases = vec![
            NcAttrValue::Chars("Celsius".into()),
            NcAttrValue::Strings(vec!["a".into(), "b".into()]),
            NcAttrValue::Bytes(vec![-3]),
            NcAttrValue::UBytes(vec![200, 1]),
            NcAttrValue::Shorts(vec![-999]),
            NcAttrValue::UShorts(vec![65535]),
            NcAttrValue::Ints(vec![7, -8]),
            NcAttrValue::UInts(vec![4_000_000_000]),
            NcAttrValue::Int64s(vec![-(1 << 40)]),
            NcAttrValue::UInt64s(vec![1 << 63]),
            NcAttrValue::Floats(vec![0.01]),
            NcAttrValue::Doubles(vec![1.5, 2.25]),
        ];
        for value in cases {
            let (json, type_name) = to_json(&value).unwrap();
            assert_eq!(from_json("a", &json, type_name).unwrap(), value, "{json} as {type_name:?}");
        }
    }

    #[test]
    fn non_finite_floats_are_strings() {
        let (json, t) = to_json(&NcAttrValue::Floats(vec![f32::NAN, f32::INFINITY, f32::NEG_INFINITY])).unwrap();
        assert_eq!(json, json!(["NaN", "Infinity", "-Infinity"]));
        let NcAttrValue::Floats(back) = from_json("fill", &json, t).unwrap() else { panic!("floats") };
        assert!(back[0].is_nan() && back[1] == f32::INFINITY && back[2] == f32::NEG_INFINITY);
    }

    #[test]
    fn json_implies_text_int_and_double() {
        assert_eq!(from_json("u", &json!("K"), None).unwrap(), NcAttrValue::Chars("K".into()));
        assert_eq!(from_json("n", &json!([1, 2]), None).unwrap(), NcAttrValue::Ints(vec![1, 2]));
        assert_eq!(from_json("x", &json!(0.5), None).unwrap(), NcAttrValue::Doubles(vec![0.5]));
        assert_eq!(
            from_json("big", &json!(1u64 << 40), None).unwrap(),
            NcAttrValue::Doubles(vec![(1u64 << 40) as f64])
        );
        assert_eq!(from_json("t", &json!({"a": 1}), None).unwrap(), NcAttrValue::Chars("{\"a\":1}".into()));
        let err = from_json("v", &json!(70000), Some("i16")).unwrap_err();
        assert_eq!(err, "attribute `v`: 70000 does not fit in i16");
    }
}
