use runner_plugin::{Args, DimValue, Host, Inputs, Plugin, TaskContext};
use std::path::PathBuf;
struct H;
impl Host for H {
    fn scratch_dir(&self) -> std::io::Result<PathBuf> { Ok("/tmp".into()) }
    fn will_allocate(&self, _: u64) {}
}
fn main() {
    let index: Vec<(&str, DimValue)> = vec![];
    let ctx = TaskContext::new("s", "k", "c", &index, 0, &H);
    let synth = runner_std_plugins::synth::Synth;
    for (i, wet) in [0.02, 0.1, 0.3, 0.6].iter().enumerate() {
        let args = Args::new(serde_json::json!({"ny": 970, "nx": 1042, "wet_fraction": wet, "seed": "look"}).as_object().unwrap().clone());
        let t = std::time::Instant::now();
        let n = 20;
        let mut v = None;
        for _ in 0..n { v = Some(synth.run(&ctx, &args, &Inputs::default()).unwrap()); }
        println!("wet {wet}: {:.2} ms per field", t.elapsed().as_secs_f64() * 1000.0 / n as f64);
        let v = v.unwrap();
        runner_std_plugins::npy::write_array(&PathBuf::from(format!("/tmp/synth_{i}.npy")), v.as_array().unwrap()).unwrap();
    }
}
