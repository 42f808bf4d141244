//! Multi-host tests: a lab of network namespaces (see `hosts/mod.rs`) with one PostgreSQL host,
//! two metadata hosts sharing its database, and eight storage hosts, each with its own IP
//! address; the test process is the client, over the lab's bridge. Needs root and iproute2.
//!
//! Also checks that the example deployment in `deploy/` parses with the real config types.

mod common;
mod hosts;

use common::content;
use hosts::{Lab, LabOptions, MetaList};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// (size, file id): sizes around block (64 KiB), shard and chunk (4 MiB) boundaries.
fn dataset() -> Vec<(String, u64, usize)> {
    let sizes = [
        0,
        1,
        2,
        100,
        4095,
        4096,
        4097,
        64 * 1024 + 1,
        200 * 1024,
        MIB,
        MIB + 1,
        3 * MIB + 5,
        4 * MIB - 1,
        4 * MIB,
        4 * MIB + 1,
        8 * MIB,
        9 * MIB,
        9 * MIB + 7,
        12 * MIB + 3,
        0,
    ];
    sizes.iter().enumerate().map(|(i, &size)| (format!("/smoke/f{i:02}-{size}"), 1000 + i as u64, size)).collect()
}

async fn check_all(lab: &Lab, client: &client::Client, files: &[(String, u64, usize)], what: &str) {
    let t = Instant::now();
    for (path, id, size) in files {
        let got = match client.read_file(path).await {
            Ok(b) => b,
            Err(e) => lab.fail(&format!("{what}: reading {path} ({size} bytes) failed: {e}")),
        };
        if got.len() != *size {
            lab.fail(&format!("{what}: {path}: read {} bytes, wrote {size}", got.len()));
        }
        if got[..] != content(*id, *size)[..] {
            let at = got.iter().zip(content(*id, *size)).position(|(a, b)| *a != b).unwrap_or(0);
            lab.fail(&format!("{what}: {path}: content differs from what was written (first difference at byte {at})"));
        }
    }
    let bytes: usize = files.iter().map(|f| f.2).sum();
    lab.log(&format!("{what}: {} files, {:.1} MiB bit-exact in {:.2}s", files.len(), bytes as f64 / MIB as f64, t.elapsed().as_secs_f64()));
}

fn status_counts(lab: &Lab, meta: usize) -> (u64, u64, usize) {
    let s = lab.status(meta).unwrap_or_else(|e| lab.fail(&e));
    let up = s["nodes"].as_array().map_or(0, |n| n.iter().filter(|n| n["state"] == "up").count());
    (s["chunks_degraded"].as_u64().unwrap_or(u64::MAX), s["chunks_unavailable"].as_u64().unwrap_or(u64::MAX), up)
}

/// 8 storage + 2 metadata + 1 PostgreSQL hosts: write through the first metadata host, read
/// through the second, lose one storage host to SIGKILL and another to a cut link, read
/// everything again, heal both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_storage_two_meta_hosts_survive_kill_and_partition() {
    // Storage nodes take a single metadata address until they accept a list; then
    // `MetaList::All` (or TROVE_LAB_STORAGE_META=all) gives them every metadata host.
    let lab = Lab::start(LabOptions { storage_meta: MetaList::from_env_or(MetaList::First(1)), ..LabOptions::default() });
    let states = lab.node_states(0).unwrap_or_else(|e| lab.fail(&e));
    assert!(states.iter().all(|s| s.as_deref() == Some("up")), "status after start: {states:?}");
    let status = lab.status(1).unwrap_or_else(|e| lab.fail(&e));
    assert!(
        status["engine"].as_str().is_some_and(|e| e.contains("postgres")),
        "the second metadata host runs on PostgreSQL: {status:#}"
    );
    assert_eq!(status["nodes"].as_array().map(Vec::len), Some(8), "the second metadata host sees all 8 nodes: {status:#}");

    // Write through metadata host 1.
    let files = dataset();
    let writer = lab.client(0).await;
    let t = Instant::now();
    if let Err(e) = writer.mkdir_p("/smoke").await {
        lab.fail(&format!("mkdir /smoke through meta1: {e}"));
    }
    for (path, id, size) in &files {
        if let Err(e) = writer.write_file(path, &content(*id, *size)).await {
            lab.fail(&format!("writing {path} ({size} bytes) through meta1 failed: {e}"));
        }
    }
    let bytes: usize = files.iter().map(|f| f.2).sum();
    lab.log(&format!("wrote {} files, {:.1} MiB through meta1 in {:.2}s", files.len(), bytes as f64 / MIB as f64, t.elapsed().as_secs_f64()));

    // Read through metadata host 2: one namespace on one database.
    let reader = lab.client(1).await;
    check_all(&lab, &reader, &files, "through meta2").await;
    let ls = lab.cli(1, &["ls", "/smoke"], Duration::from_secs(20)).unwrap_or_else(|e| lab.fail(&e));
    let listing = String::from_utf8_lossy(&ls.stdout);
    assert!(ls.status.success(), "trove ls through meta2: {}", String::from_utf8_lossy(&ls.stderr));
    for (path, _, _) in &files {
        let name = path.rsplit('/').next().unwrap_or_default();
        assert!(listing.lines().any(|l| l.split_whitespace().any(|w| w == name)), "`trove ls /smoke` through meta2 lacks {name}:\n{listing}");
    }
    let (degraded, unavailable, up) = status_counts(&lab, 0);
    assert_eq!((degraded, unavailable, up), (0, 0, 8), "healthy cluster: (degraded, unavailable, nodes up)");

    // Lose two storage hosts: one to power loss, one to a network partition.
    let (killed, cut) = (2, 5);
    lab.storage(killed).kill();
    lab.storage(cut).cut();
    lab.log(&format!("killed {}, cut {}", lab.storage(killed).name, lab.storage(cut).name));
    lab.wait_nodes(&[killed, cut], "down", Duration::from_secs(15));
    assert!(!lab.storage(cut).running_pids().is_empty(), "the partitioned host keeps running");
    let (degraded, unavailable, up) = status_counts(&lab, 0);
    assert_eq!(up, 6, "6 of 8 nodes up with two hosts lost");
    assert!(degraded > 0, "chunks on the lost hosts count as degraded");
    assert_eq!(unavailable, 0, "4+2 loses no chunk to two lost hosts");

    // Fresh clients: no connection or cache from before; every read goes to the survivors.
    check_all(&lab, &lab.client(1).await, &files, "2 hosts lost, through meta2").await;
    check_all(&lab, &lab.client(0).await, &files, "2 hosts lost, through meta1").await;

    // Heal: restart the killed host with its data, bring the cut link back.
    lab.storage(killed).start();
    lab.storage(cut).restore();
    lab.wait_nodes(&[killed, cut], "up", Duration::from_secs(30));
    let (degraded, unavailable, up) = status_counts(&lab, 0);
    assert_eq!((degraded, unavailable, up), (0, 0, 8), "healed cluster: (degraded, unavailable, nodes up)");
    check_all(&lab, &lab.client(1).await, &files, "healed, through meta2").await;

    // And it takes writes again, visible through the other metadata host.
    let after = ("/smoke/after-heal".to_string(), 77, 5 * MIB + 3);
    if let Err(e) = lab.client(1).await.write_file(&after.0, &content(after.1, after.2)).await {
        lab.fail(&format!("write after healing through meta2: {e}"));
    }
    check_all(&lab, &writer, &[after], "written through meta2, read through meta1").await;
    lab.log("done");
}

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Every example configuration in deploy/examples parses with the real configuration types.
#[test]
fn deploy_example_configs_parse() {
    let dir = deploy_dir().join("examples");
    let mut seen = Vec::new();
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries.into_iter().filter(|p| p.extension().is_some_and(|e| e == "toml")) {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let role = name.split(['-', '.']).next().unwrap_or_default();
        match role {
            "meta" => {
                let c = meta::MetaConfig::from_toml(&text).unwrap_or_else(|e| panic!("{name}: {e:#}"));
                assert!(matches!(c.engine, meta::EngineConfig::Postgres(_)), "{name}: the multi-host example keeps metadata in PostgreSQL");
            }
            "storage" => {
                let c = storage::StorageConfig::from_toml(&text).unwrap_or_else(|e| panic!("{name}: {e:#}"));
                assert!(c.advertise.is_some(), "{name}: a multi-host storage node advertises its address");
            }
            "s3" => {
                let c: s3gw::Config = toml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
                c.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
            }
            "nfs" => {
                let c: nfsgw::Config = toml::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
                assert!(!c.exports.is_empty(), "{name}: no exports");
            }
            other => panic!("{name}: unknown role {other:?} (name example configs meta*, storage*, s3*, nfs*)"),
        }
        seen.push(role.to_string());
    }
    for role in ["meta", "storage", "s3"] {
        assert!(seen.iter().any(|r| r == role), "deploy/examples has no {role} config");
    }
}

/// The systemd units run subcommands and flags the binary has.
#[test]
fn deploy_systemd_units_use_real_flags() {
    let dir = deploy_dir().join("systemd");
    let global = common::run(&["--help"]);
    let mut units = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "service") {
            continue;
        }
        units += 1;
        let unit = path.display();
        let text = std::fs::read_to_string(&path).expect("unit file");
        let execs: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("ExecStart=").or_else(|| l.strip_prefix("ExecStop=")).or_else(|| l.strip_prefix("ExecStopPost=")))
            .map(|cmd| cmd.trim_start_matches('-'))
            .collect();
        assert!(text.lines().any(|l| l.starts_with("ExecStart=")), "{unit}: no ExecStart");
        for exec in execs {
            let words: Vec<&str> = exec.split_whitespace().collect();
            assert_eq!(words.first(), Some(&"/usr/local/bin/trove"), "{unit}: `{exec}` runs the trove binary");
            let sub = words[1..].iter().find(|w| !w.starts_with('-')).unwrap_or_else(|| panic!("{unit}: no subcommand in `{exec}`"));
            let help = common::run(&[sub, "--help"]);
            assert!(help.status.success(), "{unit}: `trove {sub} --help` fails: {}", String::from_utf8_lossy(&help.stderr));
            let help_text = format!("{}{}", String::from_utf8_lossy(&help.stdout), String::from_utf8_lossy(&global.stdout));
            for flag in words.iter().filter(|w| w.starts_with("--")) {
                let flag = flag.split('=').next().unwrap_or(flag);
                assert!(help_text.contains(flag), "{unit}: `trove {sub}` has no {flag}");
            }
        }
        for key in ["[Unit]", "[Service]", "[Install]", "Type=simple", "Restart=on-failure", "LimitNOFILE=", "After=network-online.target"] {
            assert!(text.contains(key), "{unit}: missing {key}");
        }
    }
    assert!(units >= 4, "deploy/systemd has {units} unit files");
}

/// The example client environment file sets the variables trove-mount@.service uses.
#[test]
fn deploy_mount_env_matches_unit() {
    let env = std::fs::read_to_string(deploy_dir().join("examples/trove-mount.env")).expect("trove-mount.env");
    let unit = std::fs::read_to_string(deploy_dir().join("systemd/trove-mount@.service")).expect("trove-mount@.service");
    for var in ["TROVE_CLUSTER", "TROVE_MOUNT_OPTIONS"] {
        assert!(env.lines().any(|l| l.starts_with(&format!("{var}="))), "trove-mount.env does not set {var}");
        assert!(unit.contains(var), "trove-mount@.service does not use {var}");
    }
    let opts = env.lines().find_map(|l| l.strip_prefix("TROVE_MOUNT_OPTIONS=")).unwrap_or_default();
    let help = common::run_ok(&["mount", "--help"]);
    for flag in opts.split_whitespace().filter(|w| w.starts_with("--")) {
        assert!(help.contains(flag), "trove-mount.env: `trove mount` has no {flag}");
    }
}
