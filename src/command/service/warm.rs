//! Services prepared ahead of their tasks ([`prestart`]): the run's share started in the
//! background and warmed up (a forking spec's one process warmed, then forking the rest), and
//! idle services prepared for a kind of task they have not served yet — a step's callable
//! imported while the step's first task runs elsewhere — so that no task waits for imports
//! another interpreter could have done meanwhile.

use std::path::{Path, PathBuf};

use runner_plugin::service::WarmUp;
use runner_plugin::{ServiceIo, ServiceSpec, TaskError};

use super::{LANDED, NoRebase, Place, Pool, Sampler, Service, ensure_log_folder, fork, pool, start};

/// Starts the services of `spec` the run lacks (up to `workers` alive) in the background, when
/// none is idle or warming: `warm` prepares each (e.g. imports what tasks will call), their
/// stderr in `log_path`, and they wait idle for tasks. A worker that would start a service of
/// its own waits for these instead. A forking spec's one process is warmed and forks the rest
/// ([`fork`]); others start side by side. Idle services never prepared for `warm.key` are
/// prepared for it in the background too (taken out of the pool meanwhile, counted as warming).
pub fn prestart(spec: &ServiceSpec, workers: usize, log_path: &Path, warm: WarmUp) {
    // Called before every task of a service's plugin: nothing but the pool's lock (and an
    // `fstat` of each idle log) until a service is really to be started or prepared.
    super::idle_log::bound();
    let (places, unprepared) = {
        let mut pool = pool();
        let unprepared = take_unprepared(&mut pool, spec, &warm.key);
        let idle = !unprepared.is_empty() || pool.idle.iter().any(|s| s.spec == *spec);
        let workers = workers.min(pool.keep);
        let places = if idle || pool.warming.contains(spec) || pool.live(spec) >= workers {
            Vec::new()
        } else {
            let wanted = workers - pool.live(spec);
            // Counted as warming now, under the lock, so no worker starts one of its own meanwhile.
            let warm_ups = if spec.forks { 1 } else { wanted };
            pool.warming.extend(std::iter::repeat_n(spec.clone(), warm_ups));
            (0..wanted).map(|_| Place::reserve(&mut pool, spec)).collect::<Vec<_>>()
        };
        pool.warming.extend(std::iter::repeat_n(spec.clone(), unprepared.len()));
        (places, unprepared)
    };
    for service in unprepared {
        let warm = warm.clone();
        in_background(spec.clone(), log_path.to_path_buf(), warm.key.clone(), move |log| {
            prepare(service, log, &warm, false)
        });
    }
    if places.is_empty() {
        return;
    }
    let key = warm.key.clone();
    if spec.forks {
        in_background(spec.clone(), log_path.to_path_buf(), key, move |log| fork::warm_and_fork(places, log, warm));
    } else {
        for place in places {
            let warm = warm.clone();
            in_background(spec.clone(), log_path.to_path_buf(), key.clone(), move |log| warm_one(place, log, &warm));
        }
    }
}

/// The idle services of `spec` never prepared for `key`, out of the pool.
fn take_unprepared(pool: &mut Pool, spec: &ServiceSpec, key: &str) -> Vec<Service> {
    let unprepared = |s: &Service| s.spec == *spec && !s.warmed_for.iter().any(|k| k == key);
    if !pool.idle.iter().any(unprepared) {
        return Vec::new();
    }
    let (taken, kept) = std::mem::take(&mut pool.idle).into_iter().partition(unprepared);
    pool.idle = kept;
    taken
}

/// Runs `warm_up` (counted as warming by the caller, once per service it yields but for a
/// forking one's, counted once) on a thread of its own and puts the services it made in the
/// pool, idle, warmed for `key`.
fn in_background(
    spec: ServiceSpec,
    log_path: PathBuf,
    key: String,
    warm_up: impl FnOnce(&Path) -> Result<Vec<Service>, TaskError> + Send + 'static,
) {
    let name = "runner-service-warm-up".to_string();
    let counted = spec.clone();
    let started = std::thread::Builder::new().name(name).spawn(move || {
        let mut ready = Vec::new();
        match ensure_log_folder(&log_path).and_then(|()| warm_up(&log_path)) {
            Ok(services) => {
                for mut service in services {
                    let standing = Sampler::new(&service).sample();
                    service.set_standing(standing);
                    service.warmed_for.push(key.clone());
                    ready.push(service);
                }
            }
            Err(e) => tracing::info!("a service could not be warmed up: {e}"),
        }
        let mut pool = pool();
        pool.stop_warming(&spec);
        pool.idle.append(&mut ready);
        let beyond = pool.take_beyond_keep();
        drop(pool);
        LANDED.notify_all();
        drop(beyond);
    });
    if started.is_err() {
        pool().stop_warming(&counted);
        LANDED.notify_all();
    }
}

/// Starts the service of `place` and warms it up.
fn warm_one(place: Place, log_path: &Path, warm: &WarmUp) -> Result<Vec<Service>, TaskError> {
    let service = start(place, log_path)?;
    prepare(service, log_path, warm, true)
}

/// Has `warm` prepare `service` (`fresh`: just started). One that fails to is let go (its
/// conversation may be out of step); the tasks it was prepared for then say why themselves.
fn prepare(mut service: Service, log_path: &Path, warm: &WarmUp, fresh: bool) -> Result<Vec<Service>, TaskError> {
    let (mut rebase, mut spoiled) = (NoRebase, false);
    let io = ServiceIo::new(&mut service.requests, &mut service.replies, log_path, fresh, &mut rebase, &mut spoiled);
    (warm.prepare)(io)?;
    if spoiled || !service.is_alive() {
        return Err(TaskError::msg(format!("the service `{}` did not warm up", service.program())));
    }
    Ok(vec![service])
}
