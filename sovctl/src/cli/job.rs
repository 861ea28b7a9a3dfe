//! `sovctl job ...`: run, watch and stop jobs on a lease.
//!
//! `job run` without `--detach` behaves like running the command locally: the job's output
//! streams to standard output and sovctl exits with the job's exit status (128 + the signal
//! number when it was killed, 1 when it failed to run or was lost), so scripts and Slurm
//! prologs can use it as they would `srun`.

use super::{next_page, print_json, CmdResult, Exit, Fail, PagedList};
use crate::client::Client;
use clap::{Args, Subcommand};
use hostd_api::job::{Job, JobLimits, JobState, NewJob};
use hostd_api::query::{JobsQuery, LogsQuery};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum JobCmd {
    /// Start a job on a lease: `sovctl job run --lease ID -- /usr/bin/python3 train.py`.
    Run(RunArgs),
    /// The lease's jobs, oldest first: every page, printed as each arrives, unless `--after`
    /// or `--limit` asks for one page (whose `next_after`, if any, `--json` shows).
    List {
        #[arg(long)]
        lease: String,
        /// One page: the jobs started after job ID.
        #[arg(long, value_name = "ID")]
        after: Option<String>,
        /// One page of at most N jobs (the node allows 1 to 1,000; default 1,000).
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
    },
    /// One job: state, exit status, CPU time, memory peak, bytes in and out.
    Show {
        #[arg(long)]
        lease: String,
        job: String,
    },
    /// The job's output (standard output and error, interleaved).
    Logs {
        #[arg(long)]
        lease: String,
        job: String,
        /// Keep streaming until the job ends.
        #[arg(long, short)]
        follow: bool,
    },
    /// Stop the job (all its processes).
    Stop {
        #[arg(long)]
        lease: String,
        job: String,
    },
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[arg(long)]
    lease: String,
    /// Environment variable for the job, `NAME=VALUE` (repeatable). Values are not stored.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Working directory, relative to the lease's scratch.
    #[arg(long)]
    workdir: Option<String>,
    /// Memory limit, e.g. 512M, 8G.
    #[arg(long, value_parser = parse_bytes)]
    memory: Option<u64>,
    /// CPU limit in cores, e.g. 0.5 or 4.
    #[arg(long, value_parser = parse_cores)]
    cpus: Option<u64>,
    /// Most processes and threads.
    #[arg(long)]
    tasks: Option<u64>,
    /// Longest run, e.g. 90s, 30m, 2h, 1d.
    #[arg(long, value_parser = parse_duration)]
    max_runtime: Option<u64>,
    /// A TCP port the job serves, to be published on the node.
    #[arg(long)]
    publish: Option<u16>,
    /// Print the job and return at once instead of streaming its output.
    #[arg(long)]
    detach: bool,
    /// The program (an absolute path) and its arguments.
    #[arg(last = true, required = true, value_name = "ARGV")]
    argv: Vec<String>,
}

/// A job option's value that does not parse; clap prints the message after the option's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BadValue {
    #[error("'{0}' is not NAME=VALUE")]
    Env(String),
    #[error("'{0}' is not a size such as 512M or 8G")]
    Size(String),
    #[error("'{0}' is not a number of cores such as 0.5 or 4")]
    Cores(String),
    #[error("'{0}' is not a duration such as 90s, 30m, 2h or 1d")]
    Duration(String),
    /// A size past `u64` bytes.
    #[error("'{0}' is too large")]
    TooLarge(String),
    /// A duration past `u64` seconds.
    #[error("'{0}' is too long")]
    TooLong(String),
}

fn parse_env(s: &str) -> Result<(String, String), BadValue> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| BadValue::Env(s.to_owned()))?;
    Ok((k.to_owned(), v.to_owned()))
}

/// `512M`, `8G`, `1T`, or plain bytes; binary units.
pub fn parse_bytes(s: &str) -> Result<u64, BadValue> {
    let (num, shift) = match s.trim().to_ascii_uppercase() {
        t if t.ends_with('K') => (t[..t.len() - 1].to_owned(), 10),
        t if t.ends_with('M') => (t[..t.len() - 1].to_owned(), 20),
        t if t.ends_with('G') => (t[..t.len() - 1].to_owned(), 30),
        t if t.ends_with('T') => (t[..t.len() - 1].to_owned(), 40),
        t => (t, 0),
    };
    let n: u64 = num.parse().map_err(|_| BadValue::Size(s.to_owned()))?;
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| BadValue::TooLarge(s.to_owned()))
}

/// Cores as thousandths of a core (`0.5` → 500).
pub fn parse_cores(s: &str) -> Result<u64, BadValue> {
    let c: f64 = s.parse().map_err(|_| BadValue::Cores(s.to_owned()))?;
    if !(c.is_finite() && c > 0.0 && c <= 1_000_000.0) {
        return Err(BadValue::Cores(s.to_owned()));
    }
    Ok((c * 1000.0).round() as u64)
}

/// `90s`, `30m`, `2h`, `1d`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<u64, BadValue> {
    let t = s.trim();
    let (num, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], c),
        _ => (t, 's'),
    };
    let mult = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err(BadValue::Duration(s.to_owned())),
    };
    let n: u64 = num.parse().map_err(|_| BadValue::Duration(s.to_owned()))?;
    n.checked_mul(mult)
        .ok_or_else(|| BadValue::TooLong(s.to_owned()))
}

fn print_job(j: &Job) {
    let how = match j.state {
        JobState::Exited => format!("exited {}", j.exit_code.unwrap_or_default()),
        JobState::Killed => format!(
            "killed by signal {} ({})",
            j.signal.unwrap_or_default(),
            j.result.as_deref().unwrap_or("")
        ),
        JobState::Failed => format!("failed ({})", j.result.as_deref().unwrap_or("")),
        s => s.as_str().to_owned(),
    };
    println!(
        "{}  {}  cpu {:.2}s  mem peak {} MiB  in {} B  out {} B  {}",
        j.id,
        how,
        j.cpu_ns as f64 / 1e9,
        j.memory_peak_bytes >> 20,
        j.bytes_in,
        j.bytes_out,
        j.argv.join(" ")
    );
}

fn show<T: serde::Serialize>(json: bool, v: &T, human: impl FnOnce(&T)) -> CmdResult {
    if json {
        print_json(v)?;
    } else {
        human(v);
    }
    Ok(Exit::Ok)
}

/// The exit status `job run` ends with, as a shell would report the job.
pub fn exit_status(j: &Job) -> u8 {
    match (j.state, j.exit_code, j.signal) {
        (JobState::Exited, Some(c), _) => u8::try_from(c.clamp(0, 255)).unwrap_or(1),
        (JobState::Killed, _, Some(s)) => u8::try_from((128 + s).clamp(0, 255)).unwrap_or(1),
        _ => 1,
    }
}

/// `sovctl job ...`.
pub async fn job(c: Client, cmd: JobCmd, json: bool) -> CmdResult {
    match cmd {
        JobCmd::Run(args) => run(c, args, json).await,
        JobCmd::List {
            lease,
            after,
            limit,
        } => {
            let q = JobsQuery { after, limit };
            if q.after.is_some() || q.limit.is_some() {
                let page = c.jobs(&lease, &q).await?;
                return show(json, &page, |page| {
                    page.jobs.iter().for_each(print_job);
                    if let Some(next) = &page.next_after {
                        println!("(more: --after {next})");
                    }
                });
            }
            all_job_pages(&c, &lease, q, json).await
        }
        JobCmd::Show { lease, job } => show(json, &c.job(&lease, &job).await?, print_job),
        JobCmd::Stop { lease, job } => show(json, &c.stop_job(&lease, &job).await?, print_job),
        JobCmd::Logs { lease, job, follow } => {
            let c = if follow {
                c.with_timeout(FOLLOW_IDLE)
            } else {
                c
            };
            let mut out = tokio::io::stdout();
            c.job_logs(&lease, &job, &LogsQuery { follow }, &mut out)
                .await?;
            Ok(Exit::Ok)
        }
    }
}

/// Every page, printed as it arrives (see [`PagedList`]).
async fn all_job_pages(c: &Client, lease: &str, mut q: JobsQuery, json: bool) -> CmdResult {
    let mut list = PagedList::start("jobs", json);
    loop {
        let page = c.jobs(lease, &q).await?;
        for job in &page.jobs {
            list.item(job, print_job)?;
        }
        if !next_page(&mut q.after, page.next_after)? {
            return list.finish();
        }
    }
}

/// How long a followed log may stay silent (a quiet training epoch) before sovctl gives up.
const FOLLOW_IDLE: Duration = Duration::from_secs(24 * 3600);

async fn run(c: Client, a: RunArgs, json: bool) -> CmdResult {
    let req = NewJob {
        argv: a.argv,
        env: a.env.into_iter().collect::<BTreeMap<_, _>>(),
        workdir: a.workdir,
        limits: JobLimits {
            memory_bytes: a.memory,
            cpu_millis: a.cpus,
            tasks: a.tasks,
            max_runtime_secs: a.max_runtime,
        },
        publish: a.publish,
    };
    let j = c.start_job(&a.lease, &req).await?;
    if a.detach {
        return show(json, &j, print_job);
    }
    let c = c.with_timeout(FOLLOW_IDLE);
    let mut out = tokio::io::stdout();
    c.job_logs(&a.lease, &j.id, &LogsQuery { follow: true }, &mut out)
        .await?;
    let done = c.job(&a.lease, &j.id).await?;
    if json {
        print_json(&done)?;
    }
    match exit_status(&done) {
        0 => Ok(Exit::Ok),
        code => Err(Fail {
            exit: Exit::Job(code),
            message: format!("job {} {} (status {code})", done.id, done.state.as_str()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_durations_and_cores_parse_or_say_why() {
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("8g"), Ok(8 << 30));
        assert_eq!(parse_bytes("100"), Ok(100));
        assert_eq!(parse_bytes("lots"), Err(BadValue::Size("lots".into())));
        assert_eq!(
            parse_bytes("99999999999T"),
            Err(BadValue::TooLarge("99999999999T".into()))
        );
        assert_eq!(parse_duration("2h"), Ok(7200));
        assert_eq!(parse_duration("90"), Ok(90));
        assert_eq!(parse_duration("2w"), Err(BadValue::Duration("2w".into())));
        assert_eq!(parse_cores("0.5"), Ok(500));
        assert!(parse_cores("-1").is_err());
        assert!(parse_cores("NaN").is_err());
        assert_eq!(parse_env("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert_eq!(parse_env("A"), Err(BadValue::Env("A".into())));
    }
}
