//! The choices a user makes on the command line, parsed by hand (the bench has no clap), and the
//! command that reruns exactly this benchmark.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// What one request (or WebSocket turn) of the load generator is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// `POST /v1/responses`, JSON answer.
    Json,
    /// `POST /v1/responses` with `"stream":true`, SSE answer.
    Sse,
    /// One `response.create` turn over a Responses WebSocket.
    Ws,
    /// `POST /v1/chat/completions`, JSON answer.
    Chat,
}

impl Mode {
    const ALL: [Mode; 4] = [Mode::Json, Mode::Sse, Mode::Ws, Mode::Chat];

    /// The name used on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Json => "json",
            Mode::Sse => "sse",
            Mode::Ws => "ws",
            Mode::Chat => "chat",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the load generator sends its traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// Straight to the fake upstream: the baseline every "added" figure is relative to.
    Direct,
    /// Through `keymux serve`.
    Keymux,
    /// Through nginx as a plain reverse proxy, a reference for what "just proxying" costs.
    Nginx,
    /// Through another `keymux` build (`--baseline PATH`), to measure a change before and after in one
    /// run.
    Baseline,
}

impl Target {
    const ALL: [Target; 4] = [Target::Direct, Target::Keymux, Target::Nginx, Target::Baseline];

    /// The name used on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Target::Direct => "direct",
            Target::Keymux => "keymux",
            Target::Nginx => "nginx",
            Target::Baseline => "baseline",
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Everything the run depends on.
#[derive(Clone, Debug)]
pub struct Args {
    /// Measured seconds per (mode, concurrency, target, repetition).
    pub secs: f64,
    /// Unmeasured seconds before each measured window (connections, caches, allocator warm).
    pub warmup: f64,
    /// Repetitions; the table shows medians over them.
    pub reps: usize,
    /// Modes, in the order they run.
    pub modes: Vec<Mode>,
    /// Concurrency levels (workers, one keep-alive connection each).
    pub conc: Vec<usize>,
    /// Targets, alternated within each repetition.
    pub targets: Vec<Target>,
    /// Where to also write every raw figure as JSON.
    pub json: Option<PathBuf>,
    /// The `keymux` binary to measure (default: the one this bench was built with), so another build
    /// (an earlier commit, say) can be measured against the same upstream and generator.
    pub keymux: PathBuf,
    /// Another `keymux` binary, measured as the `baseline` target.
    pub baseline: Option<PathBuf>,
    /// Instead of the table: this many seconds of mixed traffic through Keymux alone, with RSS
    /// printed every `every` seconds.
    pub soak: Option<f64>,
    /// Seconds between the soak's readings.
    pub every: f64,
    /// Requests per mode counted under callgrind after the timed table (0: none; see `count`).
    pub instructions: usize,
    /// Only the instruction counts, no timed windows.
    pub instructions_only: bool,
    /// Where the callgrind dumps of the instruction counts are kept (default: deleted).
    pub keep_dumps: Option<PathBuf>,
}

impl Default for Args {
    fn default() -> Self {
        Self {
            secs: 6.0,
            warmup: 1.0,
            reps: 3,
            modes: Mode::ALL.to_vec(),
            conc: vec![1, 16, 64],
            targets: vec![Target::Direct, Target::Keymux, Target::Nginx],
            json: None,
            keymux: PathBuf::from(env!("CARGO_BIN_EXE_keymux")),
            baseline: None,
            soak: None,
            every: 30.0,
            instructions: 0,
            instructions_only: false,
            keep_dumps: None,
        }
    }
}

pub const USAGE: &str = "usage: cargo bench --bench gateway -- [--secs N] [--warmup N] [--reps N] \
[--modes json,sse,ws,chat] [--conc 1,16,64] [--targets direct,keymux,nginx] [--json PATH] [--keymux PATH] [--baseline PATH] \
[--instructions N]\n\
       cargo bench --bench gateway -- --instructions-only N [--modes ...] [--keymux PATH] [--baseline PATH] \
[--keep-dumps DIR]\n\
       cargo bench --bench gateway -- --soak SECS [--every SECS] [--conc N] [--keymux PATH]";

impl Args {
    /// Parses the arguments after the program name. `--bench`, which `cargo bench` adds, is ignored.
    pub fn parse(raw: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let mut args = Self::default();
        let mut raw = raw.into_iter();
        while let Some(arg) = raw.next() {
            // Accept both `--secs 6` and `--secs=6`.
            let (flag, inline) = match arg.split_once('=') {
                Some((flag, value)) => (flag.to_owned(), Some(value.to_owned())),
                None => (arg.clone(), None),
            };
            if flag == "--bench" {
                continue;
            }
            if flag == "--help" || flag == "-h" {
                return Err(USAGE.to_owned());
            }
            let value = match inline.or_else(|| raw.next()) {
                Some(value) => value,
                None => return Err(format!("{flag} needs a value\n{USAGE}")),
            };
            args.set(&flag, &value)?;
        }
        Ok(args)
    }

    fn set(&mut self, flag: &str, value: &str) -> Result<(), String> {
        match flag {
            "--secs" => self.secs = positive_secs(flag, value)?,
            "--warmup" => self.warmup = positive_secs(flag, value)?,
            "--reps" => {
                self.reps = value.parse().ok().filter(|n| *n > 0).ok_or(format!("--reps {value:?}: need N > 0"))?
            }
            "--modes" => self.modes = list(flag, value, &Mode::ALL, |m| m.name())?,
            "--targets" => self.targets = list(flag, value, &Target::ALL, |t| t.name())?,
            "--conc" => {
                self.conc = value
                    .split(',')
                    .map(|c| c.trim().parse().ok().filter(|n: &usize| (1..=1024).contains(n)))
                    .collect::<Option<Vec<usize>>>()
                    .ok_or(format!("--conc {value:?}: need a list of numbers from 1 to 1024"))?;
            }
            "--json" => self.json = Some(PathBuf::from(value)),
            "--soak" => self.soak = Some(positive_secs(flag, value)?),
            "--every" => self.every = positive_secs(flag, value)?,
            "--instructions" | "--instructions-only" => {
                self.instructions = value
                    .parse()
                    .ok()
                    .filter(|n| *n <= 100_000)
                    .ok_or(format!("{flag} {value:?}: need a number of requests per mode up to 100000"))?;
                self.instructions_only = flag == "--instructions-only";
            }
            "--keymux" => self.keymux = PathBuf::from(value),
            "--keep-dumps" => self.keep_dumps = Some(PathBuf::from(value)),
            "--baseline" => {
                self.baseline = Some(PathBuf::from(value));
                if !self.targets.contains(&Target::Baseline) {
                    self.targets.push(Target::Baseline);
                }
            }
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
        Ok(())
    }

    /// The measured window per cell.
    pub fn window(&self) -> Duration {
        Duration::from_secs_f64(self.secs)
    }

    /// The warm-up per cell.
    pub fn warmup(&self) -> Duration {
        Duration::from_secs_f64(self.warmup)
    }

    /// The command that reruns this benchmark with the same settings.
    pub fn command_line(&self) -> String {
        let join = |names: Vec<&str>| names.join(",");
        let mut line = format!(
            "cargo bench --bench gateway -- --secs {} --warmup {} --reps {} --modes {} --conc {} --targets {}",
            self.secs,
            self.warmup,
            self.reps,
            join(self.modes.iter().map(|m| m.name()).collect()),
            self.conc.iter().map(usize::to_string).collect::<Vec<_>>().join(","),
            join(self.targets.iter().map(|t| t.name()).collect()),
        );
        if let Some(path) = &self.json {
            line.push_str(&format!(" --json {}", path.display()));
        }
        if self.keymux != std::path::Path::new(env!("CARGO_BIN_EXE_keymux")) {
            line.push_str(&format!(" --keymux {}", self.keymux.display()));
        }
        if let Some(path) = &self.baseline {
            line.push_str(&format!(" --baseline {}", path.display()));
        }
        if self.instructions > 0 {
            line.push_str(&format!(" --instructions {}", self.instructions));
        }
        line
    }
}

fn positive_secs(flag: &str, value: &str) -> Result<f64, String> {
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 3600.0)
        .ok_or(format!("{flag} {value:?}: need seconds between 0 and 3600"))
}

fn list<T: Copy + PartialEq>(
    flag: &str,
    value: &str,
    all: &[T],
    name: fn(&T) -> &'static str,
) -> Result<Vec<T>, String> {
    let mut out = Vec::new();
    for part in value.split(',').map(str::trim) {
        let Some(item) = all.iter().find(|t| name(t) == part) else {
            let known: Vec<&str> = all.iter().map(name).collect();
            return Err(format!("{flag}: unknown {part:?} (known: {})", known.join(",")));
        };
        if !out.contains(item) {
            out.push(*item);
        }
    }
    Ok(out)
}
