//! Time from "start" to a running process and to a ready instance, and the memory of one idle
//! supervisor, for the local runtime. Run with `cargo bench -p runway --bench start`.
//!
//! Side by side with the same command spawned directly (the floor a supervisor adds to), so the
//! figures say what supervision costs on this machine.

#![allow(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a benchmark prints its figures"
)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use runway_runtime::spec::{
    Artifact, Check, InstanceSpec, Limits, LogLimits, Probe, Probes, RestartPolicy,
};
use runway_runtime::{LocalConfig, LocalRuntime, Runtime, SupervisorCommand};

const RUNS: usize = 20;

fn main() {
    let busybox = std::path::Path::new("/bin/busybox");
    if !busybox.exists() {
        println!("skipped: /bin/busybox is missing (apt-get install busybox-static)");
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let www = tempfile::tempdir().unwrap();
    std::fs::write(www.path().join("index.html"), "ok\n").unwrap();
    let supervisor = SupervisorCommand {
        program: env!("CARGO_BIN_EXE_runway-supervisor").into(),
        args: vec![],
    };
    let runtime = LocalRuntime::new(LocalConfig::new(state.path(), supervisor.clone()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();

    let mut direct = Vec::new();
    for _ in 0..RUNS {
        let started = Instant::now();
        let mut child = std::process::Command::new(busybox)
            .arg("true")
            .spawn()
            .unwrap();
        direct.push(started.elapsed());
        child.wait().unwrap();
    }

    let mut to_running = Vec::new();
    let mut to_ready = Vec::new();
    let mut rss_kib = Vec::new();
    rt.block_on(async {
        for run in 0..RUNS {
            let id = format!("bench-{run}");
            let spec = spec(&id, busybox, www.path());
            let started = Instant::now();
            runtime.instance_ensure(spec).await.unwrap();
            let mut status = runtime.watch(&id).await.unwrap();
            status.wait_for(|s| s.pid.is_some()).await.unwrap();
            to_running.push(started.elapsed());
            status.wait_for(|s| s.ready).await.unwrap();
            to_ready.push(started.elapsed());
            tokio::time::sleep(Duration::from_millis(300)).await;
            let pid = status.borrow().supervisor_pid;
            rss_kib.push(rss(pid));
            runtime.instance_remove(&id).await.unwrap();
        }
    });

    println!("local runtime, command artifact ({RUNS} runs each; median / p95 / max)");
    println!(
        "  spawn `busybox true` directly (peer) {}",
        summary(&mut direct)
    );
    println!(
        "  ensure → process running             {}",
        summary(&mut to_running)
    );
    println!(
        "  ensure → ready (HTTP startup probe)  {}",
        summary(&mut to_ready)
    );
    rss_kib.sort_unstable();
    println!(
        "  idle supervisor resident memory: median {} KiB, max {} KiB",
        rss_kib[rss_kib.len() / 2],
        rss_kib[rss_kib.len() - 1]
    );
    image_figures(&rt, &supervisor);
}

/// The same for an image already in the cache (pulled by digest), run by runc; beside it,
/// `runc run` of the same image's bundle running `true`, create to delete.
fn image_figures(rt: &tokio::runtime::Runtime, supervisor: &SupervisorCommand) {
    use runway_oci::testing::{BusyboxImage, Registry, push_busybox_image, tool_available};
    let tools = ["docker-registry", "skopeo", "umoci", "runc"];
    if let Some(missing) = tools.iter().find(|t| !tool_available(t)) {
        println!("image figures skipped: {missing} is missing");
        return;
    }
    let registry = Registry::start().unwrap();
    let image = BusyboxImage {
        entrypoint: vec!["/bin/sh".into(), "-c".into()],
        cmd: vec!["trap 'exit 0' TERM; httpd -f -p 127.0.0.1:$PORT -h /www & wait".into()],
        env: vec!["PATH=/bin:/usr/bin".into()],
        files: vec![("www/index.html".into(), b"ok\n".to_vec(), 0o644)],
        ..BusyboxImage::default()
    };
    let pushed = push_busybox_image(&registry, "bench/web", "1", &image).unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut config = LocalConfig::new(state.path(), supervisor.clone());
    config.pull.insecure_registries = vec![registry.host()];
    let runtime = LocalRuntime::new(config.clone());

    let mut cold = Duration::ZERO;
    let mut to_running = Vec::new();
    let mut to_ready = Vec::new();
    rt.block_on(async {
        for run in 0..=RUNS {
            let id = format!("bench-image-{run}");
            let mut spec = spec(&id, std::path::Path::new("/bin/busybox"), state.path());
            spec.artifact = Artifact::Image {
                reference: pushed.pinned.clone(),
                command: None,
                args: None,
                working_dir: None,
            };
            let started = Instant::now();
            runtime.instance_ensure(spec).await.unwrap();
            let mut status = runtime.watch(&id).await.unwrap();
            status.wait_for(|s| s.pid.is_some()).await.unwrap();
            let running = started.elapsed();
            status.wait_for(|s| s.ready).await.unwrap();
            if run == 0 {
                cold = started.elapsed();
            } else {
                to_running.push(running);
                to_ready.push(started.elapsed());
            }
            runtime.instance_remove(&id).await.unwrap();
        }
    });

    // The peer: runc itself on a bundle of the same cached image.
    let store = runway_oci::Store::open(state.path().join("images")).unwrap();
    let pulled = rt
        .block_on(store.pull(&pushed.pinned, &config.pull))
        .unwrap();
    let bundle_dir = state.path().join("peer-bundle");
    let options = runway_oci::BundleOptions {
        command: Some(vec!["/bin/true".into()]),
        cgroups_path: Some("/runway/bench-peer".into()),
        ..runway_oci::BundleOptions::default()
    };
    runway_oci::build_bundle(&bundle_dir, &pulled.config, &pulled.rootfs, &options).unwrap();
    let mut runc_run = Vec::new();
    for run in 0..RUNS {
        let started = Instant::now();
        let status = std::process::Command::new("runc")
            .args(["run", "--bundle"])
            .arg(&bundle_dir)
            .arg(format!("bench-peer-{run}"))
            .stdin(std::process::Stdio::null())
            .status()
            .unwrap();
        runc_run.push(started.elapsed());
        assert!(status.success());
    }

    println!("local runtime, cached OCI image run by runc ({RUNS} runs each; median / p95 / max)");
    println!(
        "  `runc run` of `true`, create to exit (peer) {}",
        summary(&mut runc_run)
    );
    println!(
        "  ensure → container running                 {}",
        summary(&mut to_running)
    );
    println!(
        "  ensure → ready (HTTP startup probe)        {}",
        summary(&mut to_ready)
    );
    println!("  first start, pull and unpack included: {cold:.2?}");
}

fn spec(id: &str, busybox: &std::path::Path, www: &std::path::Path) -> InstanceSpec {
    InstanceSpec {
        id: id.to_owned(),
        service: "bench".to_owned(),
        revision: "bench-1".to_owned(),
        artifact: Artifact::Command {
            program: "/bin/sh".into(),
            args: vec![
                "-c".to_owned(),
                format!(
                    "exec {} httpd -f -p 127.0.0.1:$PORT -h .",
                    busybox.display()
                ),
            ],
            working_dir: Some(www.to_owned()),
        },
        env: BTreeMap::new(),
        secret_env: BTreeMap::new(),
        port: Some(0),
        container_port: None,
        probes: Probes {
            startup: Some(Probe {
                check: Check::Http {
                    path: "/index.html".to_owned(),
                },
                initial_delay: Duration::ZERO,
                period: Duration::from_millis(10),
                timeout: Duration::from_secs(1),
                failure_threshold: 500,
                success_threshold: 1,
            }),
            ..Probes::default()
        },
        stop_signal: "TERM".parse().unwrap(),
        stop_grace_period: Duration::from_secs(5),
        restart: RestartPolicy::default(),
        limits: Limits::default(),
        logs: LogLimits::default(),
        managed: false,
        inherit_env: false,
        sandbox: None,
        network: None,
        egress: Default::default(),
        identity_token: None,
    }
}

fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn summary(samples: &mut [Duration]) -> String {
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    format!("{:>8.2?} / {:>8.2?} / {:>8.2?}", at(0.5), at(0.95), at(1.0))
}
