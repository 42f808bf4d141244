//! `sim`: runs the deterministic simulation of a Trove cluster, one seed or a sweep.
//!
//! `sim --seed N --trace` replays seed N and prints its trace; `sim --seeds 100` sweeps seeds
//! 0..100 and reports each one's verdict and trace digest, then the simulator's speed. Exits
//! with 1 if any seed found a violation, so a sweep can gate a build.

use clap::Parser;
use std::time::{Duration, Instant};
use wire::world::Flaw;

#[derive(Parser)]
#[command(about = "The deterministic simulation of a whole Trove cluster, driven by a seed")]
struct Args {
    /// Run this one seed.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Sweep this many seeds, from --from on.
    #[arg(long)]
    seeds: Option<u64>,
    /// The first seed of a sweep.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Print the trace of the run as it happens (one seed).
    #[arg(long)]
    trace: bool,
    /// Plant a bug on purpose (repeatable): ack-before-durable, ignore-failed-shard-put,
    /// gc-ignores-clones, lease-before-expiry, skip-dir-sync, forget-replies. The checkers should
    /// catch it.
    #[arg(long = "flaw", value_parser = parse_flaw)]
    flaws: Vec<Flaw>,
    /// Simulated seconds of workload under faults, per seed.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Messages, per thousand, whose connection breaks before or after the handler ran.
    #[arg(long, default_value_t = 10)]
    drop_per_mille: u32,
    /// Messages, per thousand, delivered twice.
    #[arg(long, default_value_t = 10)]
    duplicate_per_mille: u32,
    /// Clients running the workload at once.
    #[arg(long, default_value_t = 2)]
    clients: usize,
    /// Stop a sweep at the first seed with a violation.
    #[arg(long)]
    stop_at_first: bool,
    /// Most milliseconds any host's wall clock is off the true one, either way (0: one clock).
    #[arg(long, default_value_t = sim::Config::new(0).clock_skew_ms_max)]
    clock_skew_ms: u64,
    /// Leave the disks alone: no failing, full or rotting disks, no power loss, no scrub (the
    /// chaos as drawn before disks were simulated, which older seeds were found with).
    #[arg(long)]
    no_disk_chaos: bool,
    /// The metadata servers' allowance for skewed clocks, in milliseconds (default: twice
    /// --clock-skew-ms). Lower shows what the allowance prevents.
    #[arg(long)]
    meta_clock_skew_ms: Option<u64>,
    /// What clients share, checked for linearizability: two-dirs (two directories of two names,
    /// renames within and across them), one-dir (one directory of four names, no renames: as
    /// first built) or off.
    #[arg(long, default_value = "two-dirs", value_parser = parse_shared)]
    shared: sim::linear::Shared,
}

fn parse_shared(name: &str) -> Result<sim::linear::Shared, String> {
    match name {
        "two-dirs" => Ok(sim::linear::Shared::TwoDirs),
        "one-dir" => Ok(sim::linear::Shared::OneDir),
        "off" => Ok(sim::linear::Shared::Off),
        _ => Err(format!("no sharing {name:?}; choose two-dirs, one-dir or off")),
    }
}

fn parse_flaw(name: &str) -> Result<Flaw, String> {
    Flaw::ALL.into_iter().find(|f| f.name() == name).ok_or_else(|| {
        let names: Vec<&str> = Flaw::ALL.iter().map(|f| f.name()).collect();
        format!("no flaw {name:?}; the flaws are {}", names.join(", "))
    })
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let seeds = match (args.seed, args.seeds) {
        (Some(seed), _) => seed..seed + 1,
        (None, Some(count)) => args.from..args.from + count,
        (None, None) => {
            eprintln!("sim: give --seed N (one run) or --seeds COUNT (a sweep)");
            return std::process::ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let (mut failed, mut simulated, mut ran) = (Vec::new(), Duration::ZERO, 0u64);
    for seed in seeds {
        let mut config = sim::Config::new(seed);
        config.flaws = args.flaws.clone();
        config.duration = Duration::from_secs(args.seconds);
        config.echo = args.trace;
        config.faults.drop_per_mille = args.drop_per_mille;
        config.faults.duplicate_per_mille = args.duplicate_per_mille;
        config.clients = args.clients;
        config.clock_skew_ms_max = args.clock_skew_ms;
        config.disk_chaos = !args.no_disk_chaos;
        config.meta_clock_skew_max_ms = args.meta_clock_skew_ms;
        config.shared = args.shared;
        let took = Instant::now();
        let outcome = match sim::run(&config) {
            Ok(outcome) => outcome,
            Err(e) => {
                eprintln!("seed {seed}: the simulation could not run: {e:#}");
                return std::process::ExitCode::from(2);
            }
        };
        ran += 1;
        simulated += outcome.simulated;
        let verdict = if outcome.violations.is_empty() {
            "ok".to_string()
        } else {
            format!("{} VIOLATION(S)", outcome.violations.len())
        };
        println!(
            "seed {seed}: {verdict}; {} operations, {} messages ({} lost, {} doubled), {:.1} simulated s in {:.2} s, trace {:016x} ({} lines)",
            outcome.ops,
            outcome.net.requests,
            outcome.net.dropped,
            outcome.net.duplicated,
            outcome.simulated.as_secs_f64(),
            took.elapsed().as_secs_f64(),
            outcome.trace.digest(),
            outcome.trace.lines().len(),
        );
        for v in &outcome.violations {
            println!("  {v}");
        }
        if !outcome.violations.is_empty() {
            failed.push(seed);
            if args.stop_at_first {
                break;
            }
        }
    }
    let wall = started.elapsed().as_secs_f64();
    println!(
        "{ran} seed(s) in {wall:.1} s: {:.1} seeds/min, {:.1} simulated s per wall s; failed: {failed:?}",
        ran as f64 * 60.0 / wall,
        simulated.as_secs_f64() / wall
    );
    if failed.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::from(1)
    }
}
