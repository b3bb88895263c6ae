//! `synth_sst`: one day of one variable of a synthetic NOAA OISST v2.1 file — `sst`, `anom`,
//! `err` or `ice` on a regular lat/lon grid (720 × 1440 is the real one) — with the real files'
//! dims, coordinates, CF attributes and packing, so `write_netcdf` writes files shaped like the
//! real ones and the OISST recipes can be run and benchmarked without downloading 14,006 files.
//!
//! The array is f32 `[time=1, zlev=1, lat, lon]` with the attribute layout of `read_netcdf`
//! (see [`crate::netcdf`]): `encoding` packs it as `short` with `scale_factor` 0.01 and
//! `_FillValue` -999, like the real files. Land (a fixed mask of smooth continents, about 30%
//! of the cells) is NaN in every variable; `ice` is NaN also where the sea has no ice. Values are
//! smooth functions of latitude, longitude and day, plus a small hash-based noise that `seed`
//! changes: the same arguments give the same bytes.

use std::f64::consts::PI;

use runner_plugin::serde_json::{Map, Value as Json, json};
use runner_plugin::{
    ArgError, ArgSpec, Args, Array, DType, InputMeta, Inputs, InputsForEstimate, Plugin, TaskContext, TaskError, Value,
    ValueMeta,
};

use crate::support::{fnv1a64, positive_whole, shown};

/// Days from the time origin of OISST (`days since 1978-01-01 12:00:00`) to its first day, 1981-09-01.
const FIRST_DAY: i64 = 1339;

const ARGS: &[ArgSpec] = &[
    ArgSpec::required("variable", "sst, anom, err or ice"),
    ArgSpec::required("day", "the date, YYYY-MM-DD or YYYYMMDD, or a whole number of days after 1981-09-01"),
    ArgSpec::optional("ny", "720", "latitudes (the real grid has 720)"),
    ArgSpec::optional("nx", "1440", "longitudes (the real grid has 1440)"),
    ArgSpec::optional("seed", "0", "any text; changes the noise"),
];

/// One variable of a synthetic OISST file.
pub struct SynthSst;

/// What each variable is, as the real files describe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Var {
    Sst,
    Anom,
    Err,
    Ice,
}

impl Var {
    fn parse(name: &str) -> Option<Var> {
        Some(match name {
            "sst" => Var::Sst,
            "anom" => Var::Anom,
            "err" => Var::Err,
            "ice" => Var::Ice,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Var::Sst => "sst",
            Var::Anom => "anom",
            Var::Err => "err",
            Var::Ice => "ice",
        }
    }

    /// `long_name`, `units`, `valid_min`, `valid_max` of the real files.
    fn describe(self) -> (&'static str, &'static str, i16, i16) {
        match self {
            Var::Sst => ("Daily sea surface temperature", "Celsius", -300, 4500),
            Var::Anom => ("Daily sea surface temperature anomalies", "Celsius", -1200, 1200),
            Var::Err => ("Estimated error standard deviation of analysed_sst", "Celsius", 0, 1000),
            Var::Ice => ("Sea ice concentration", "%", 0, 100),
        }
    }
}

/// Days since 1978-01-01 12:00 of `day`: a date or a count of days after 1981-09-01.
fn time_of(day: &Json) -> Option<i64> {
    let text = match day {
        Json::Number(n) => return n.as_i64().map(|d| FIRST_DAY + d),
        Json::String(s) => s.trim().to_string(),
        _ => return None,
    };
    if let Ok(d) = text.parse::<i64>()
        && text.len() != 8
    {
        return Some(FIRST_DAY + d);
    }
    let digits: String = text.chars().filter(char::is_ascii_digit).collect();
    if digits.len() != 8 || !(text.len() == 8 || text.len() == 10) {
        return None;
    }
    let (y, m, d) = (digits[..4].parse().ok()?, digits[4..6].parse().ok()?, digits[6..].parse().ok()?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    Some(days_from_civil(y, m, d) - days_from_civil(1978, 1, 1))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

struct Grid {
    ny: usize,
    nx: usize,
}

impl Grid {
    fn lat(&self, i: usize) -> f64 {
        -90.0 + (i as f64 + 0.5) * 180.0 / self.ny as f64
    }

    fn lon(&self, j: usize) -> f64 {
        (j as f64 + 0.5) * 360.0 / self.nx as f64
    }
}

/// Smooth continents: where this is above 0.35, about 30% of the globe.
fn land(lat: f64, lon: f64) -> bool {
    let (phi, lam) = (lat.to_radians(), lon.to_radians());
    let v = (2.0 * lam).sin() * (1.5 * phi).cos()
        + 0.6 * (3.0 * lam + 1.0).cos() * (2.5 * phi).sin()
        + 0.3 * (5.0 * lam - phi).sin();
    v > 0.55 || lat < -78.0
}

/// A small deterministic noise in [-1, 1) for a cell.
fn noise(seed: u64, i: usize, j: usize) -> f64 {
    let mut h = seed ^ ((i as u64) << 32 | j as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    (h >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

fn value(var: Var, lat: f64, lon: f64, time: i64, n: f64) -> f64 {
    let season = (2.0 * PI * (time as f64 - 80.0) / 365.25).sin() * lat.to_radians().sin();
    let phi = lat.to_radians();
    match var {
        Var::Sst => (29.0 * phi.cos().powi(2) - 1.8 + 3.0 * season + 0.3 * n).max(-1.8),
        Var::Anom => 0.8 * (time as f64 / 9.0 + 3.0 * lon.to_radians()).sin() * phi.cos() + 0.2 * n,
        Var::Err => 0.25 + 0.15 * (4.0 * phi).sin().abs() + 0.02 * n,
        Var::Ice => f64::NAN,
    }
}

/// Ice concentration (%) near the poles, NaN where the sea has none.
fn ice(lat: f64, time: i64, n: f64) -> f64 {
    let winter = (2.0 * PI * (time as f64 - 80.0) / 365.25).sin() * -lat.signum();
    let edge = 62.0 - 6.0 * winter;
    if lat.abs() < edge {
        return f64::NAN;
    }
    ((lat.abs() - edge) / 12.0 * 100.0 + 5.0 * n).clamp(0.0, 100.0)
}

fn attrs_of(var: Var, grid: &Grid, time: i64) -> Map<String, Json> {
    let (long_name, units, valid_min, valid_max) = var.describe();
    let lats: Vec<Json> = (0..grid.ny).map(|i| crate::netcdf::attrs::float32(grid.lat(i) as f32)).collect();
    let lons: Vec<Json> = (0..grid.nx).map(|j| crate::netcdf::attrs::float32(grid.lon(j) as f32)).collect();
    let coord = |values: Vec<Json>, attrs: Json| json!({"dims": [], "dtype": "f32", "values": values, "attrs": attrs, "attr_types": {}});
    let mut coords = Map::new();
    for (name, c) in [
        (
            "time",
            coord(
                vec![json!(time)],
                json!({"long_name": "Center time of the day", "units": "days since 1978-01-01 12:00:00"}),
            ),
        ),
        (
            "zlev",
            coord(vec![json!(0.0)], json!({"long_name": "Sea surface height", "units": "meters", "positive": "down"})),
        ),
        ("lat", coord(lats, json!({"long_name": "Latitude", "units": "degrees_north"}))),
        ("lon", coord(lons, json!({"long_name": "Longitude", "units": "degrees_east"}))),
    ] {
        let mut c = c;
        c["dims"] = json!([name]);
        coords.insert(name.into(), c);
    }
    let mut out = Map::new();
    out.insert("variable".into(), json!(var.name()));
    out.insert("dims".into(), json!(["time", "zlev", "lat", "lon"]));
    out.insert(
        "attrs".into(),
        json!({"long_name": long_name, "units": units, "valid_min": valid_min, "valid_max": valid_max}),
    );
    out.insert("attr_types".into(), json!({"valid_min": "i16", "valid_max": "i16"}));
    out.insert(
        "encoding".into(),
        json!({"dtype": "i16", "scale_factor": 0.01, "add_offset": 0.0, "_FillValue": -999, "packing_type": "f32"}),
    );
    out.insert("coords".into(), Json::Object(coords));
    out.insert(
        "global_attrs".into(),
        json!({
            "title": "NOAA/NCEI 1/4 Degree Daily Optimum Interpolation Sea Surface Temperature (OISST) Analysis, Version 2.1 - Final (synthetic, made by runner's synth_sst)",
            "Conventions": "CF-1.6, ACDD-1.3",
            "source": "synthetic",
        }),
    );
    out.insert("global_attr_types".into(), json!({}));
    out
}

impl Plugin for SynthSst {
    fn name(&self) -> &'static str {
        "synth_sst"
    }

    fn about(&self) -> &'static str {
        "one day of sst, anom, err or ice of a synthetic NOAA OISST v2.1 file: f32 [1, 1, ny, nx] with the real files' coordinates, CF attributes, packing (short, scale 0.01, fill -999) and a land mask"
    }

    fn args(&self) -> &'static [ArgSpec] {
        ARGS
    }

    fn check(&self, args: &Args) -> Result<(), ArgError> {
        let variable = args.str("variable")?;
        Var::parse(&variable).ok_or_else(|| {
            ArgError::new(
                "variable",
                format!("`variable` must be sst, anom, err or ice, got {}", shown(args.get("variable"))),
            )
        })?;
        time_of(args.get("day").unwrap_or(&Json::Null)).ok_or_else(|| {
            ArgError::new(
                "day",
                format!(
                    "`day` must be a date (YYYY-MM-DD or YYYYMMDD) or a number of days, got {}",
                    shown(args.get("day"))
                ),
            )
        })?;
        if args.contains("ny") {
            positive_whole(args, "ny")?;
        }
        if args.contains("nx") {
            positive_whole(args, "nx")?;
        }
        Ok(())
    }

    fn output(&self, args: &Args, _inputs: &[InputMeta]) -> Result<ValueMeta, ArgError> {
        let (ny, nx) = (args.u64_or("ny", 720)? as usize, args.u64_or("nx", 1440)? as usize);
        Ok(ValueMeta::Array { dtype: DType::F32, shape: vec![1, 1, ny, nx] })
    }

    /// The field and its coordinates as JSON (about 100 bytes a value).
    fn estimate(&self, args: &Args, _inputs: InputsForEstimate<'_>, output: &ValueMeta) -> u64 {
        let (ny, nx) = (args.u64_or("ny", 720).unwrap_or(720), args.u64_or("nx", 1440).unwrap_or(1440));
        output.bytes().unwrap_or(0) + (ny + nx) * 100 + (64 << 10)
    }

    fn run(&self, ctx: &TaskContext, args: &Args, _inputs: &Inputs) -> Result<Value, TaskError> {
        let arg = |e: ArgError| TaskError::msg(e.message);
        let var = Var::parse(&args.str("variable").map_err(arg)?).ok_or_else(|| TaskError::msg("unknown variable"))?;
        let time = time_of(args.get("day").unwrap_or(&Json::Null)).ok_or_else(|| TaskError::msg("bad `day`"))?;
        let grid = Grid {
            ny: args.u64_or("ny", 720).map_err(arg)? as usize,
            nx: args.u64_or("nx", 1440).map_err(arg)? as usize,
        };
        let seed = fnv1a64(format!("{}/{}/{time}", args.str_or("seed", "0").map_err(arg)?, var.name()).as_bytes());
        let mut data = ctx.zeros::<f32>(&[1, 1, grid.ny, grid.nx]);
        let slice = data.as_slice_mut().expect("a new array is contiguous");
        ctx.par_chunks_mut(slice, grid.nx, |i, row| {
            let lat = grid.lat(i);
            for (j, cell) in row.iter_mut().enumerate() {
                let lon = grid.lon(j);
                let n = noise(seed, i, j);
                *cell = if land(lat, lon) {
                    f32::NAN
                } else if var == Var::Ice {
                    ice(lat, time, n) as f32
                } else {
                    value(var, lat, lon, time, n) as f32
                };
            }
        });
        let mut array = Array::from_ndarray(data);
        for (k, v) in attrs_of(var, &grid, time) {
            array.attrs_mut().insert(k, v);
        }
        Ok(Value::Array(array))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ndarray_of, run};

    #[test]
    fn dates_and_day_counts_give_oisst_times() {
        assert_eq!(time_of(&json!("1981-09-01")), Some(1339));
        assert_eq!(time_of(&json!("19810901")), Some(1339));
        assert_eq!(time_of(&json!(0)), Some(1339));
        assert_eq!(time_of(&json!("3")), Some(1342));
        assert_eq!(time_of(&json!("2020-01-05")), Some(1339 + 14_005));
        assert_eq!(time_of(&json!("1981-13-01")), None);
        assert_eq!(time_of(&json!("x")), None);
    }

    #[test]
    fn fields_have_land_fill_ice_and_the_oisst_layout() {
        let sst = run(&SynthSst, json!({"variable": "sst", "day": "1981-09-01", "ny": 90, "nx": 180}), &[]).unwrap();
        let values = ndarray_of::<f32>(&sst);
        assert_eq!(values.shape(), &[1, 1, 90, 180]);
        let land = values.iter().filter(|v| v.is_nan()).count() as f64 / values.len() as f64;
        assert!((0.2..0.45).contains(&land), "land fraction {land}");
        assert!(values.iter().filter(|v| !v.is_nan()).all(|&v| (-1.8..=32.0).contains(&v)));
        let attrs = sst.as_array().unwrap().attrs();
        assert_eq!(attrs["dims"], json!(["time", "zlev", "lat", "lon"]));
        assert_eq!(attrs["coords"]["time"]["values"], json!([1339]));
        assert_eq!(attrs["coords"]["lat"]["values"][0], json!(-89.0));
        assert_eq!(attrs["encoding"]["_FillValue"], json!(-999));
        let ice = run(&SynthSst, json!({"variable": "ice", "day": 0, "ny": 90, "nx": 180}), &[]).unwrap();
        let ice = ndarray_of::<f32>(&ice);
        let with_ice = ice.iter().filter(|v| !v.is_nan()).count();
        assert!(with_ice > 0 && with_ice < ice.len() / 4, "{with_ice} cells with ice");
        let again = run(&SynthSst, json!({"variable": "sst", "day": "1981-09-01", "ny": 90, "nx": 180}), &[]).unwrap();
        assert!(ndarray_of::<f32>(&again).iter().zip(values.iter()).all(|(a, b)| a.to_bits() == b.to_bits()));
        let err = run(&SynthSst, json!({"variable": "salt", "day": 0}), &[]).unwrap_err();
        assert_eq!(err.message(), "`variable` must be sst, anom, err or ice, got \"salt\"");
    }
}
