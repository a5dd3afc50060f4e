//! One reader run as a child process of its own, timed and bounded: its wall-clock (from
//! the spawn to its exit), its peak resident memory as GNU time's `%M` reports it (the
//! maximum resident set size of `wait4`'s rusage, in KiB), and its CPU time (`%U`, `%S`).

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use idem_host::cleanup::{Interrupted, stop_requested};
use idem_lab::error::usage;

/// GNU time: the child's peak resident memory, from `wait4`.
pub(super) const GNU_TIME: &str = "/usr/bin/time";

/// The file of the work folder that names the running reader's process group, which
/// the broker's shell kills if the bench is killed.
pub(super) const READER: &str = "reader.pgid";

/// What a run measured.
pub(super) struct Measured {
    /// From the spawn to the exit.
    pub(super) wall: Duration,
    /// Peak resident memory, KiB.
    pub(super) rss_kib: u64,
    /// CPU time, user and system, of the child and what it waited for.
    pub(super) cpu: Duration,
    /// What it printed on standard output.
    pub(super) stdout: String,
}

/// GNU time's `%M %U %S`: KiB, and user and system seconds.
fn figures(line: &str) -> Option<(u64, Duration)> {
    let mut f = line.split_whitespace();
    let rss = f.next()?.parse().ok()?;
    let user: f64 = f.next()?.parse().ok()?;
    let system: f64 = f.next()?.parse().ok()?;
    Some((rss, Duration::try_from_secs_f64(user + system).ok()?))
}

/// Refuses to go on without GNU time.
pub(super) fn need_gnu_time() -> anyhow::Result<()> {
    if Path::new(GNU_TIME).is_file() {
        Ok(())
    } else {
        Err(usage(format!(
            "the bench measures peak memory with GNU time, and {GNU_TIME} is missing (on Debian: apt-get install time)"
        )))
    }
}

/// Kills `child` and its process group (it was spawned as the leader of its own), then
/// reaps it.
pub(super) fn kill_group(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-s", "KILL", "--", &format!("-{}", child.id())])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let _ = child.kill();
    let _ = child.wait();
}

/// Waits for `child` to exit, `limit` at most; past it, or on SIGINT, SIGTERM or SIGHUP,
/// kills its process group and fails. Its exit status and when it exited.
pub(super) fn wait_bounded(
    child: &mut Child,
    limit: Duration,
    what: &str,
) -> anyhow::Result<(ExitStatus, Instant)> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok((status, Instant::now()));
        }
        if stop_requested() {
            kill_group(child);
            return Err(Interrupted.into());
        }
        if started.elapsed() > limit {
            kill_group(child);
            anyhow::bail!("{what} did not finish within {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `program args` alone under GNU time, its output in files of `dir`, `limit` at
/// most; an error unless it exits 0.
pub(super) fn measure(
    program: &Path,
    args: &[String],
    dir: &Path,
    limit: Duration,
    what: &str,
) -> anyhow::Result<Measured> {
    let file = |name: &str| -> PathBuf { dir.join(name) };
    let (out, err, rss) = (file("stdout"), file("stderr"), file("rss"));
    let started = Instant::now();
    let mut child = Command::new(GNU_TIME)
        .args(["-f", "%M %U %S", "-o"])
        .arg(&rss)
        .arg(program)
        .args(args)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out)?)
        .stderr(std::fs::File::create(&err)?)
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start {GNU_TIME} for {what} ({e})"))?;
    // Named for the broker's shell, which kills this group if the bench is killed.
    let group = dir.join(READER);
    if let Err(e) = std::fs::write(&group, child.id().to_string()) {
        kill_group(&mut child);
        anyhow::bail!("cannot write {} ({e})", group.display());
    }
    let waited = wait_bounded(&mut child, limit, what);
    std::fs::remove_file(&group)?;
    let (status, ended) = waited?;
    let wall = ended - started;
    if !status.success() {
        let stderr = std::fs::read_to_string(&err).unwrap_or_default();
        let last = stderr
            .lines()
            .last()
            .unwrap_or("it printed nothing on stderr");
        let last = last.strip_prefix("idem: ").unwrap_or(last);
        anyhow::bail!("{what} failed ({status}): {last}");
    }
    let (rss_kib, cpu) = std::fs::read_to_string(&rss)
        .ok()
        .and_then(|t| t.lines().last().and_then(figures))
        .ok_or_else(|| anyhow::anyhow!("{GNU_TIME} reported no peak memory for {what}"))?;
    Ok(Measured {
        wall,
        rss_kib,
        cpu,
        stdout: std::fs::read_to_string(&out)?,
    })
}
