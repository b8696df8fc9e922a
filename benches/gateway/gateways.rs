//! The gateways under test as child processes: `keymux serve` (headless, keys from the environment)
//! and optionally nginx as a plain reverse proxy. Each is pinned with `taskset`, its output is kept
//! (only the tail) for error messages, and it is sampled through `/proc`.

use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};

use rand::distributions::{Alphanumeric, DistString as _};
use tokio::time::Duration;

use crate::args::Target;
use crate::procs::{self, Memory};

/// Keys Keymux pools (`KEYMUX_KEY_A`, `_B`, `_C`): enough for its router to spread sessions.
pub const KEYS: usize = 3;
/// Where nginx is looked for.
pub const NGINX: &str = "/usr/sbin/nginx";
/// How long a gateway may take to start listening.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// The same under valgrind, which runs a program tens of times slower.
const VALGRIND_START_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a gateway may take to exit after SIGINT before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of each output stream kept for error messages.
const TAIL_BYTES: usize = 16 * 1024;

/// A running gateway process.
pub struct Gateway {
    /// Which target it is.
    pub target: Target,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its process id (the program itself: `taskset` execs it).
    pub pid: i32,
    child: Option<Child>,
    output: Arc<Mutex<Tail>>,
    _dir: tempfile::TempDir,
}

impl Gateway {
    /// How many runtime threads a Keymux gateway serves on, as its `listening on` line says
    /// (`runtime_threads=N`; read with the address, so it is in the tail by now).
    pub fn runtime_threads(&self) -> Option<usize> {
        let text = lock(&self.output).text();
        let (_, after) = text.split_once("runtime_threads=")?;
        after.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    }
}

/// CPU and memory of a gateway (its process and direct children) at one moment.
#[derive(Clone, Copy, Default)]
pub struct Sample {
    /// `utime + stime`, in clock ticks.
    pub ticks: u64,
    /// Resident memory, summed over the processes.
    pub memory: Memory,
}

/// A random string for tokens and secrets.
pub fn random(len: usize) -> String {
    Alphanumeric.sample_string(&mut rand::thread_rng(), len)
}

/// Starts `keymux serve` against the fake upstream and waits for its "listening on" line.
pub async fn start_keymux(
    target: Target,
    binary: &Path,
    upstream: SocketAddr,
    cpu: Option<usize>,
    token: &str,
) -> Result<Gateway, String> {
    start_keymux_under(target, binary, upstream, cpu, token, None).await
}

/// `start_keymux`, under valgrind's callgrind writing to `callgrind_out` when given (its counters
/// read with `callgrind_control`; see `count`).
pub async fn start_keymux_under(
    target: Target,
    binary: &Path,
    upstream: SocketAddr,
    cpu: Option<usize>,
    token: &str,
    callgrind_out: Option<&Path>,
) -> Result<Gateway, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    let mut command = match callgrind_out {
        None => pinned(binary, cpu),
        Some(out) => {
            let mut command = pinned(Path::new("valgrind"), cpu);
            // Names written out in full in every dump, so each one reads alone in callgrind_annotate.
            command.args(["--tool=callgrind", "--compress-strings=no", "--compress-pos=no"]);
            command.arg(format!("--callgrind-out-file={}", out.display())).arg(binary);
            command
        }
    };
    let start_timeout = if callgrind_out.is_some() { VALGRIND_START_TIMEOUT } else { START_TIMEOUT };
    command
        .args(["serve", "--ephemeral", "--listen", "127.0.0.1:0", "--upstream"])
        .arg(format!("http://{upstream}/v1"))
        // A clean environment: no user config, keychain or proxy variables leak into the measurement.
        .env_clear()
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .env("XDG_DATA_HOME", dir.path().join("data"))
        .env("KEYMUX_KEY_A", format!("sk-bench-a{}", random(40)))
        .env("KEYMUX_KEY_B", format!("sk-bench-b{}", random(40)))
        .env("KEYMUX_KEY_C", format!("sk-bench-c{}", random(40)))
        .env("KEYMUX_CLIENT_TOKEN", token)
        .env("KEYMUX_INSTALL_SECRET", random(32))
        .env("KEYMUX_LOG", "info");
    let Spawned { mut child, output, listening } = spawn(command, "keymux")?;
    let started = crate::now();
    loop {
        if let Ok(addr) = listening.try_recv() {
            let pid = child_pid(&child);
            return Ok(Gateway { target, addr, pid, child: Some(child), output, _dir: dir });
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("keymux exited at start ({status}); its output:\n{}", lock(&output).text()));
        }
        if crate::since(started) > start_timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "keymux did not print `listening on` within {} s; its output:\n{}",
                start_timeout.as_secs(),
                lock(&output).text()
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts nginx as a plain reverse proxy to the fake upstream, with a config in a temp dir.
pub async fn start_nginx(upstream: SocketAddr, cpu: Option<usize>) -> Result<Gateway, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("temp dir: {e}"))?;
    // nginx takes a fixed port: borrow a free one from the kernel (a race no other process here runs).
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port for nginx: {e}"))?;
    let conf = dir.path().join("nginx.conf");
    std::fs::write(&conf, nginx_config(dir.path(), addr, upstream)).map_err(|e| format!("{}: {e}", conf.display()))?;
    let mut command = pinned(Path::new(NGINX), cpu);
    command.arg("-p").arg(dir.path()).arg("-c").arg(&conf);
    let Spawned { mut child, output, .. } = spawn(command, "nginx")?;
    let started = crate::now();
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            let pid = child_pid(&child);
            return Ok(Gateway { target: Target::Nginx, addr, pid, child: Some(child), output, _dir: dir });
        }
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
            return Err(format!("nginx exited at start ({status}):\n{}{log}", lock(&output).text()));
        }
        if crate::since(started) > START_TIMEOUT {
            return Err(format!("nginx did not accept connections within 20 s:\n{}", lock(&output).text()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `worker_processes 1`, keep-alive HTTP/1.1 to the upstream, no buffering (SSE must flow), no access
/// log, and no cap on requests per connection (nginx closes after 1000 by default, which would
/// measure reconnections). WebSocket upgrades pass through; other requests keep the upstream connection alive.
fn nginx_config(dir: &Path, listen: SocketAddr, upstream: SocketAddr) -> String {
    let dir = dir.display();
    // As root, nginx would run its worker as `nobody`, which cannot enter the private temp dir.
    let user = if rustix::process::getuid().is_root() { "user root;\n" } else { "" };
    format!(
        "{user}worker_processes 1;\ndaemon off;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\n\
         events {{ worker_connections 4096; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {dir}/client_body;\n  proxy_temp_path {dir}/proxy;\n\
         \x20 fastcgi_temp_path {dir}/fastcgi;\n  uwsgi_temp_path {dir}/uwsgi;\n  scgi_temp_path {dir}/scgi;\n\
         \x20 map $http_upgrade $connection_upgrade {{ default upgrade; '' ''; }}\n\
         \x20 keepalive_requests 1000000;\n  keepalive_timeout 300s;\n\
         \x20 upstream fake {{ server {upstream}; keepalive 256; keepalive_requests 1000000; }}\n\
         \x20 server {{\n    listen {listen};\n    client_max_body_size 16m;\n    location / {{\n\
         \x20     proxy_pass http://fake;\n      proxy_http_version 1.1;\n\
         \x20     proxy_set_header Upgrade $http_upgrade;\n      proxy_set_header Connection $connection_upgrade;\n\
         \x20     proxy_buffering off;\n      proxy_request_buffering off;\n      proxy_read_timeout 300s;\n\
         \x20   }}\n  }}\n}}\n"
    )
}

/// The command, under `taskset -c CPU` when pinning.
fn pinned(program: &Path, cpu: Option<usize>) -> Command {
    match cpu {
        Some(cpu) => {
            let mut command = Command::new("taskset");
            command.arg("-c").arg(cpu.to_string()).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// Spawns with stdout and stderr drained by two threads into bounded tails (a full pipe would stall
/// the gateway). The first stdout line with an `http://` address is sent on the returned channel.
fn spawn(mut command: Command, name: &str) -> Result<Spawned, String> {
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().map_err(|e| format!("cannot start {name}: {e}"))?;
    let output = Arc::new(Mutex::new(Tail::default()));
    let (tx, rx) = mpsc::channel();
    if let Some(stdout) = child.stdout.take() {
        let output = output.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // Kept before the address is sent: whoever gets the address finds its line in the tail.
                lock(&output).push(format!("{line}\n").as_bytes());
                if let Some(addr) = listening_addr(&line) {
                    let _ = tx.send(addr);
                }
            }
        });
    }
    if let Some(mut stderr) = child.stderr.take() {
        let output = output.clone();
        // Raw chunks, not lines: Keymux logs a line per request, and this thread shares a CPU with the
        // fake upstream and the load generator.
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n @ 1..) = stderr.read(&mut buf) {
                lock(&output).push(&buf[..n]);
            }
        });
    }
    Ok(Spawned { child, output, listening: rx })
}

/// A started child, its output tail, and the address it said it listens on (once it says so).
struct Spawned {
    child: Child,
    output: Arc<Mutex<Tail>>,
    listening: mpsc::Receiver<SocketAddr>,
}

/// The address in `… listening on http://IP:PORT/v1 …`: the first `http://` token of the line.
fn listening_addr(line: &str) -> Option<SocketAddr> {
    if !line.contains("listening on") {
        return None;
    }
    let (_, rest) = line.split_once("http://")?;
    let authority = rest.split(|c: char| c == '/' || c.is_whitespace() || c == '"').next()?;
    authority.parse().ok()
}

fn child_pid(child: &Child) -> i32 {
    rustix::process::Pid::from_child(child).as_raw_nonzero().get()
}

fn lock(output: &Mutex<Tail>) -> std::sync::MutexGuard<'_, Tail> {
    // A reader thread that panicked leaves the tail as it was, which is still worth showing.
    output.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The last `TAIL_BYTES` of a process's output.
#[derive(Default)]
struct Tail {
    bytes: VecDeque<u8>,
}

impl Tail {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend(chunk);
        let excess = self.bytes.len().saturating_sub(TAIL_BYTES);
        self.bytes.drain(..excess);
    }

    /// The last lines, without the colour codes Keymux's log writes even into a pipe.
    fn text(&self) -> String {
        const LINES: usize = 40;
        let (a, b) = self.bytes.as_slices();
        let raw = String::from_utf8_lossy(&[a, b].concat()).into_owned();
        let mut plain = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                // CSI sequences end with a letter (`ESC [ 2 m`).
                chars.by_ref().find(char::is_ascii_alphabetic);
            } else {
                plain.push(c);
            }
        }
        let lines: Vec<&str> = plain.lines().collect();
        lines[lines.len().saturating_sub(LINES)..].join("\n")
    }
}

impl Gateway {
    /// CPU ticks and memory, summed over the process and its direct children (nginx's worker).
    pub fn sample(&self) -> Result<Sample, String> {
        let mut sample = Sample::default();
        for pid in procs::with_children(self.pid) {
            sample.ticks += procs::cpu_ticks(&format!("/proc/{pid}/stat"))?;
            let memory = procs::memory(pid)?;
            sample.memory.rss_kb += memory.rss_kb;
            sample.memory.peak_kb += memory.peak_kb;
        }
        Ok(sample)
    }

    /// Resets the peak RSS of every process of the gateway; false if the kernel refused.
    pub fn reset_peak(&self) -> bool {
        procs::with_children(self.pid).into_iter().all(procs::reset_peak)
    }

    /// An error with the gateway's output if it has exited.
    pub fn check_alive(&mut self) -> Result<(), String> {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(status))) => Err(format!(
                "{} exited during the run ({status}); its output:\n{}",
                self.target,
                lock(&self.output).text()
            )),
            _ => Ok(()),
        }
    }

    /// SIGINT, then waits; kills it if it does not exit in time. Says how it ended.
    pub async fn stop(mut self) -> String {
        let Some(mut child) = self.child.take() else {
            return "already stopped".into();
        };
        if let Err(e) =
            rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::INT)
        {
            return format!("could not send SIGINT ({e})");
        }
        let started = crate::now();
        while crate::since(started) < STOP_TIMEOUT {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return "exited cleanly on SIGINT".into(),
                Ok(Some(status)) => return format!("exited on SIGINT with {status}"),
                Ok(None) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(e) => return format!("wait failed: {e}"),
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        "did not exit within 10 s of SIGINT and was killed".into()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // Leaving through an error must not leave a gateway running.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
