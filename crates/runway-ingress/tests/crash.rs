//! The ingress's own crash, through the real `runway-ingress --supervise`, with no control
//! plane: its worker killed (`kill -9`) under a steady load fails only the requests it had in
//! flight, and a new worker serves the saved table within a second; a worker that dies before
//! serving is started again after a growing pause; a worker whose supervisor was killed serves
//! on until `daemon::ensure` replaces it; `stop` ends both processes, every time.
//!
//! Every process is started in a process group of its own and the group is killed when the
//! test ends, however it ends.

// Tests and benches keep time on tokio's runtimes, never on an event loop's.
#![allow(clippy::disallowed_methods)]
// Test code: a failing unwrap is a failing test.
#![allow(clippy::unwrap_used)]

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use runway_ingress::RouteTableConfig;
use runway_ingress::control::{self, ControlClient, Hello, Listen, RemoteOptions};
use runway_ingress::daemon::{IngressCommand, Launch, Outcome};
use tokio::io::AsyncBufReadExt;
use tokio::net::{TcpListener, TcpStream};

const HOST: &str = "hello.dev.localhost";
const BINARY: &str = env!("CARGO_BIN_EXE_runway-ingress");
/// Every test's bound.
const BOUND: Duration = Duration::from_secs(90);

/// An instance answering `ok`, keep-alive.
async fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(|_: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    address
}

/// A state directory holding `table` as the saved one: what a control plane left there.
fn saved(dir: &Path, table: &RouteTableConfig) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(
        state.join(control::TABLE_FILE),
        serde_json::to_vec(table).unwrap(),
    )
    .unwrap();
    state
}

fn alive(pid: u32) -> bool {
    // A zombie has exited: its parent has yet to reap it.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim()
            .starts_with('Z')
    })
}

/// Waits (10 s at most) until process `pid` has ended; `what` says which, if it does not.
async fn ended(pid: u32, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < deadline, "{what} still runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn kill9(target: &str) {
    let _ = std::process::Command::new("kill")
        .args(["-9", "--", target])
        .stderr(Stdio::null())
        .status();
}

/// Kills the process groups it names when dropped: nothing a test started outlives it.
#[derive(Default)]
struct Groups(Mutex<Vec<u32>>);

impl Groups {
    fn add(&self, pgid: u32) {
        self.0.lock().unwrap().push(pgid);
    }
}

impl Drop for Groups {
    fn drop(&mut self) {
        for pgid in self.0.lock().unwrap().iter() {
            kill9(&format!("-{pgid}"));
        }
    }
}

/// `runway-ingress --supervise` on `state`, its stderr kept (and echoed).
struct Supervised {
    child: tokio::process::Child,
    stderr: Arc<Mutex<String>>,
}

impl Supervised {
    fn spawn(state: &Path, groups: &Groups) -> Self {
        let mut child = tokio::process::Command::new(BINARY)
            .arg("--supervise")
            .arg("--state-dir")
            .arg(state)
            .arg("--ca-dir")
            .arg(state.join("ca"))
            .args(["--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"])
            .args(["--event-loops", "2", "--threads", "1"])
            .args(["--shutdown-grace-seconds", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        groups.add(child.id().unwrap());
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let kept = Arc::clone(&stderr);
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                eprintln!("ingress: {line}");
                kept.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        Self { child, stderr }
    }

    /// Started, and answering as its supervisor.
    async fn start(state: &Path, groups: &Groups) -> (Self, Hello) {
        let ingress = Self::spawn(state, groups);
        let hello = answered(state, ingress.pid()).await;
        (ingress, hello)
    }

    fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

/// The `hello` of the ingress on `state` once `pid` answers as its process, at most 10 s.
async fn answered(state: &Path, pid: u32) -> Hello {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(hello) = ControlClient::new(state).hello().await
            && hello.pid == pid
        {
            return hello;
        }
        assert!(Instant::now() < deadline, "pid {pid} never answered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A worker other than `old` answering on `state`, at most 10 s.
async fn new_worker(state: &Path, old: u32) -> Hello {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(hello) = ControlClient::new(state).hello().await
            && hello.worker.is_some_and(|worker| worker != old)
        {
            return hello;
        }
        assert!(Instant::now() < deadline, "no worker in place of {old}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One request: when it was sent and when it ended, and what went wrong.
#[derive(Debug, Clone)]
struct Sent {
    at: Instant,
    done: Instant,
    failure: Option<String>,
}

/// Clients sending `GET /` at a steady pace, each on a keep-alive connection that it replaces
/// with a new one every tenth request (and whenever the ingress closed it).
struct Load {
    sent: Arc<Mutex<Vec<Sent>>>,
    stop: Arc<AtomicBool>,
    clients: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(address: SocketAddr, clients: usize, per_second: f64) -> Self {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let period = Duration::from_secs_f64(clients as f64 / per_second);
        let clients = (0..clients)
            .map(|index| {
                let (sent, stop) = (Arc::clone(&sent), Arc::clone(&stop));
                tokio::spawn(async move {
                    // Spread over the period, not all at once.
                    tokio::time::sleep(period.mul_f64(index as f64 / 16.0)).await;
                    let mut ticks = tokio::time::interval(period);
                    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                    let mut connection = None;
                    let mut count = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        ticks.tick().await;
                        count += 1;
                        if count.is_multiple_of(10) {
                            connection = None;
                        }
                        let at = Instant::now();
                        let outcome = tokio::time::timeout(
                            Duration::from_secs(5),
                            request(&mut connection, address),
                        )
                        .await
                        .unwrap_or_else(|_| Err("no answer within 5 s".to_owned()));
                        if outcome.is_err() {
                            connection = None;
                        }
                        sent.lock().unwrap().push(Sent {
                            at,
                            done: Instant::now(),
                            failure: outcome.err(),
                        });
                    }
                })
            })
            .collect();
        Self {
            sent,
            stop,
            clients,
        }
    }

    async fn stop(self) -> Vec<Sent> {
        self.stop.store(true, Ordering::Relaxed);
        for client in self.clients {
            client.await.unwrap();
        }
        self.sent.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.sent.lock().unwrap().len()
    }
}

type Connection = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// `GET /` on the kept connection, or a new one when there is none or the ingress closed it
/// while idle (as any client's pool does; a request sent is never sent again).
async fn request(connection: &mut Option<Connection>, address: SocketAddr) -> Result<(), String> {
    if let Some(sender) = connection
        && sender.ready().await.is_err()
    {
        *connection = None;
    }
    let sender = match connection {
        Some(sender) => sender,
        None => {
            let stream = TcpStream::connect(address)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let (sender, driver) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| format!("handshake: {e}"))?;
            tokio::spawn(driver);
            connection.insert(sender)
        }
    };
    let request = Request::get("/")
        .header("host", HOST)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    if status != 200 || &body[..] != b"ok" {
        return Err(format!("{status} {}", String::from_utf8_lossy(&body)));
    }
    Ok(())
}

/// What the load saw around `kill`: requests in all, those failed (with why), the time from
/// it to the first request sent after it that was served, and the longest time with none
/// served.
struct Seen {
    total: usize,
    failures: Vec<String>,
    /// Failed requests sent after the kill (on a connection whose end the client had yet to
    /// read).
    failed_after: usize,
    first_after: Option<Duration>,
    longest_gap: Duration,
}

fn seen(sent: &[Sent], kill: Instant) -> Seen {
    let failures = sent.iter().filter_map(|s| s.failure.clone()).collect();
    let failed_after = sent
        .iter()
        .filter(|s| s.failure.is_some() && s.at >= kill)
        .count();
    let first_after = sent
        .iter()
        .filter(|s| s.failure.is_none() && s.at >= kill)
        .map(|s| s.done - kill)
        .min();
    let mut served: Vec<Instant> = sent
        .iter()
        .filter(|s| s.failure.is_none())
        .map(|s| s.done)
        .collect();
    served.sort();
    let longest_gap = served
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .max()
        .unwrap_or_default();
    Seen {
        total: sent.len(),
        failures,
        failed_after,
        first_after,
        longest_gap,
    }
}

/// Clients at once, and the pace of them all.
const CLIENTS: usize = 16;
const PER_SECOND: f64 = 500.0;

/// `kill -9` of the serving process under ~500 requests/s, with no control plane: the
/// listening sockets stay open in the supervisor, which starts another worker at once on
/// them and the saved table; only the requests the dead one had in flight fail (at most one
/// per client), and the ingress serves again within a second. Then `stop` on the control
/// socket ends the supervisor and its worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_fails_only_its_requests_in_flight() {
    let groups = Groups::default();
    tokio::time::timeout(BOUND, async {
        let dir = tempfile::tempdir().unwrap();
        let state = saved(dir.path(), &support::one_route(upstream().await));
        let (ingress, hello) = Supervised::start(&state, &groups).await;
        let first = hello.worker.expect("a worker");
        assert_ne!(first, ingress.pid());
        let address = hello.bound.http;

        let load = Load::start(address, CLIENTS, PER_SECOND);
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        let before = load.count();
        kill9(&first.to_string());
        // `kill` has returned: the worker is dead.
        let kill = Instant::now();
        let replaced = new_worker(&state, first).await;
        let respawned = kill.elapsed();
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        let sent = load.stop().await;
        let seen = seen(&sent, kill);
        let rate = before as f64 / 1.5;
        eprintln!(
            "worker killed at ~{rate:.0} requests/s with {CLIENTS} clients: {} of {} requests \
             failed ({:.2} %), {} of them sent after the kill; first request sent after the \
             kill served {:?} after it; the longest time with none served {:?}; a new worker \
             (pid {}) answered on the control socket {respawned:?} after the kill; failures: \
             {:?}",
            seen.failures.len(),
            seen.total,
            100.0 * seen.failures.len() as f64 / seen.total as f64,
            seen.failed_after,
            seen.first_after,
            seen.longest_gap,
            replaced.worker.unwrap_or_default(),
            seen.failures
        );
        assert_eq!(replaced.pid, ingress.pid(), "the supervisor was replaced");
        assert!(
            seen.failures.len() <= CLIENTS,
            "more failures than requests in flight: {:?}",
            seen.failures
        );
        let first_after = seen.first_after.expect("nothing served after the kill");
        assert!(
            first_after < Duration::from_secs(1),
            "served again only {first_after:?} after the kill"
        );
        assert!(seen.total > 1_000, "only {} requests", seen.total);
        assert!(
            ingress.stderr().contains(&format!(
                "the serving process (pid {first}) died (signal: 9"
            )),
            "{}",
            ingress.stderr()
        );

        // `stop` on the control socket: both go.
        let worker = replaced.worker.unwrap();
        ControlClient::new(&state).stop().await.unwrap();
        let mut ingress = ingress;
        let status = tokio::time::timeout(Duration::from_secs(10), ingress.child.wait())
            .await
            .expect("the supervisor did not stop")
            .unwrap();
        assert!(status.success(), "{status}: {}", ingress.stderr());
        assert!(!alive(worker), "the worker outlived its supervisor");
        assert!(!state.join(control::SOCKET).exists());
        assert!(!state.join(control::PID_FILE).exists());
    })
    .await
    .unwrap();
}

/// A first worker that cannot serve (the saved table is unreadable) fails the supervisor, with
/// the reason; a worker that dies before serving after one served is started again after a
/// pause that grows, said on stderr, and serves once it can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_cannot_start_is_started_again_after_a_growing_pause() {
    let groups = Groups::default();
    tokio::time::timeout(BOUND, async {
        let dir = tempfile::tempdir().unwrap();
        let good = support::one_route(upstream().await);
        let state = saved(dir.path(), &good);
        let table_file = state.join(control::TABLE_FILE);

        std::fs::write(&table_file, "{not json").unwrap();
        let mut broken = Supervised::spawn(&state, &groups);
        let status = tokio::time::timeout(Duration::from_secs(10), broken.child.wait())
            .await
            .expect("a supervisor whose first worker cannot serve kept running")
            .unwrap();
        assert!(!status.success());
        // Its pipe drained.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            broken.stderr().contains("ended before it served"),
            "{}",
            broken.stderr()
        );
        assert!(!state.join(control::SOCKET).exists());

        std::fs::write(&table_file, serde_json::to_vec(&good).unwrap()).unwrap();
        let (ingress, hello) = Supervised::start(&state, &groups).await;
        let first = hello.worker.unwrap();
        std::fs::write(&table_file, "{not json").unwrap();
        kill9(&first.to_string());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ingress
            .stderr()
            .contains("3 time(s) in a row; starting another in 400ms")
        {
            assert!(Instant::now() < deadline, "{}", ingress.stderr());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        std::fs::write(&table_file, serde_json::to_vec(&good).unwrap()).unwrap();
        let again = new_worker(&state, first).await;
        assert_eq!(again.pid, ingress.pid());
        let mut connection = None;
        request(&mut connection, again.bound.http).await.unwrap();
    })
    .await
    .unwrap();
}

/// How `daemon::ensure` starts the ingress of `state`: on free loopback ports.
fn launch(dir: &Path, state: &Path) -> Launch {
    Launch {
        command: IngressCommand {
            program: BINARY.into(),
            args: Vec::new(),
        },
        state_dir: state.to_owned(),
        listen: Listen::plain(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:0".parse().unwrap(),
        ),
        ca_dir: dir.join("ca"),
        shutdown_grace: Duration::from_secs(1),
        start_timeout: Duration::from_secs(10),
    }
}

/// The supervisor killed: its worker serves on alone (every request served), says so, and
/// `daemon::ensure` replaces it with a supervised ingress on the same port, as it replaces
/// one of another build; the old worker then stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_supervisor_is_killed_serves_on_until_replaced() {
    let groups = Groups::default();
    tokio::time::timeout(BOUND, async {
        let dir = tempfile::tempdir().unwrap();
        let state = saved(dir.path(), &support::one_route(upstream().await));
        let launch = launch(dir.path(), &state);
        let (remote, outcome) = runway_ingress::daemon::ensure(&launch, RemoteOptions::default())
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::Started);
        let (supervisor, worker) = (remote.hello().pid, remote.hello().worker.unwrap());
        groups.add(supervisor);
        let address = remote.hello().bound.http;

        let load = Load::start(address, 4, 100.0);
        tokio::time::sleep(Duration::from_millis(300)).await;
        kill9(&supervisor.to_string());
        let alone = answered(&state, worker).await;
        assert_eq!(alone.worker, None);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(alive(worker));

        let (replacement, outcome) =
            runway_ingress::daemon::ensure(&launch, RemoteOptions::default())
                .await
                .unwrap();
        groups.add(replacement.hello().pid);
        match outcome {
            Outcome::Replaced { old_pid, reason } => {
                assert_eq!(old_pid, worker);
                assert!(reason.contains("without a supervisor"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(replacement.hello().bound.http, address, "the port moved");
        assert!(replacement.hello().worker.is_some());
        ended(worker, "the old worker").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let sent = load.stop().await;
        let failures: Vec<String> = sent.iter().filter_map(|s| s.failure.clone()).collect();
        eprintln!(
            "supervisor killed, then its worker replaced: {} of {} requests failed: {failures:?}",
            failures.len(),
            sent.len()
        );
        // An idle keep-alive connection the old worker closes as it stops can meet a request.
        assert!(failures.len() <= 4, "{failures:?}");

        ControlClient::new(&state).stop().await.unwrap();
        ended(replacement.hello().pid, "the replacement").await;
    })
    .await
    .unwrap();
}

/// `stop` on the control socket always ends the supervisor: its server tasks end as the stop
/// they were asked for, never as a crash the supervisor answers with another worker (the
/// quickstart's ingress outlived it so, 1 run in a few). Stopped at once after it answers,
/// time after time, to meet the race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_asked_for_ends_the_supervisor_every_time() {
    const RUNS: usize = 25;
    let groups = Groups::default();
    tokio::time::timeout(BOUND, async {
        let dir = tempfile::tempdir().unwrap();
        let state = saved(dir.path(), &support::one_route(upstream().await));
        for run in 1..=RUNS {
            let (mut ingress, hello) = Supervised::start(&state, &groups).await;
            // Every other run, on a worker started in place of a killed one.
            if run % 2 == 0 {
                let first = hello.worker.expect("a worker");
                kill9(&first.to_string());
                new_worker(&state, first).await;
            }
            ControlClient::new(&state).stop().await.unwrap();
            let status = tokio::time::timeout(Duration::from_secs(10), ingress.child.wait())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "run {run}: the supervisor did not stop: {}",
                        ingress.stderr()
                    )
                })
                .unwrap();
            assert!(
                status.success(),
                "run {run}: {status}: {}",
                ingress.stderr()
            );
            assert!(
                !ingress.stderr().contains("died (exit"),
                "run {run}: the stop was taken for a crash: {}",
                ingress.stderr()
            );
        }
    })
    .await
    .unwrap();
}

/// The operator's bounds on clients (`ingress.traffic` in the server's configuration) reach
/// the ingress it starts: past one connection from this address, the next is closed at
/// accept. The ingress reports them as asked, so the next `ensure` adopts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_client_bounds_reach_the_ingress_it_starts() {
    let groups = Groups::default();
    tokio::time::timeout(BOUND, async {
        let dir = tempfile::tempdir().unwrap();
        let state = saved(dir.path(), &support::one_route(upstream().await));
        let mut launch = launch(dir.path(), &state);
        launch.listen.max_connections_per_client = Some(1);
        launch.listen.max_rate_limited_clients = Some(4096);
        let (remote, outcome) = runway_ingress::daemon::ensure(&launch, RemoteOptions::default())
            .await
            .unwrap();
        groups.add(remote.hello().pid);
        assert_eq!(outcome, Outcome::Started);
        assert_eq!(remote.hello().listen.max_connections_per_client, Some(1));
        assert_eq!(remote.hello().listen.max_rate_limited_clients, Some(4096));
        let address = remote.hello().bound.http;

        let mut first = None;
        request(&mut first, address).await.unwrap();
        let mut second = None;
        let refused = request(&mut second, address).await;
        assert!(refused.is_err(), "a second connection was served");
        drop(first);
        // Once the first is closed, a connection from the address is served again.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut again = None;
            match request(&mut again, address).await {
                Ok(()) => break,
                Err(error) => assert!(Instant::now() < deadline, "{error}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        let (adopted, outcome) = runway_ingress::daemon::ensure(&launch, RemoteOptions::default())
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::Adopted);
        ControlClient::new(&state).stop().await.unwrap();
        ended(adopted.hello().pid, "the ingress").await;
    })
    .await
    .unwrap();
}
