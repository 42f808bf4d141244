//! The crate dependency rules of ARCHITECTURE.md, checked with `cargo metadata`: services never
//! depend on each other, the client never depends on a service, `wire` and `metrics` depend on
//! no other Trove crate, and no product crate links a test kit (`kv-tests`, `sim`, `e2e`).

use std::collections::{BTreeMap, BTreeSet};

#[test]
fn crate_dependencies_point_one_way() {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let packages = meta["packages"].as_array().expect("packages");
    let ours: BTreeSet<String> = packages.iter().map(|p| p["name"].as_str().unwrap_or_default().to_string()).collect();
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // The code map names crates by directory (crates/s3 holds package s3gw).
    let mut dirs: BTreeMap<String, String> = BTreeMap::new();
    for p in packages {
        let name = p["name"].as_str().unwrap_or_default().to_string();
        let dir = std::path::Path::new(p["manifest_path"].as_str().unwrap_or_default())
            .parent()
            .and_then(|d| d.file_name())
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_else(|| name.clone());
        dirs.insert(name.clone(), dir);
        let set = deps.entry(name).or_default();
        for d in p["dependencies"].as_array().into_iter().flatten() {
            let dep = d["name"].as_str().unwrap_or_default().to_string();
            // Dev-dependencies may pull in anything for tests.
            if ours.contains(&dep) && d["kind"].is_null() {
                set.insert(dep);
            }
        }
    }
    // Allowed Trove dependencies of each crate (normal dependencies only).
    // `metrics` is a leaf every role records into, like a logging facade: it knows no Trove
    // crate, so depending on it couples nobody to anybody.
    let allowed: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("wire", &[][..]),
        ("metrics", &[][..]),
        ("erasure", &["wire"][..]),
        ("kv", &[][..]),
        ("kv-tests", &["kv"][..]),
        ("kv-redb", &["kv"][..]),
        ("kv-postgres", &["kv"][..]),
        ("meta", &["wire", "kv", "kv-redb", "kv-postgres", "metrics"][..]),
        ("storage", &["wire", "metrics"][..]),
        ("client", &["wire", "erasure", "metrics"][..]),
        ("mount", &["client", "wire", "metrics"][..]),
        ("bench", &["client"][..]),
        ("s3gw", &["client", "wire", "metrics"][..]),
        ("nfsgw", &["client", "wire", "metrics"][..]),
        ("dashboard", &["client", "wire", "metrics"][..]),
        ("jobs", &["client", "meta", "wire", "erasure", "metrics", "vision"][..]),
        ("vision", &[][..]),
        ("py", &["client", "vision"][..]),
        // The simulator is a test kit of its own: it runs the services, so it links them.
        ("sim", &["wire", "kv", "kv-tests", "meta", "storage", "client", "jobs"][..]),
        // The launcher starts processes; it reaches them as any client would, and writes the
        // storage roles' key files and object configs.
        ("launcher", &["client", "storage", "wire"][..]),
        // The end-to-end tests run the trove executable; their library links nothing.
        ("e2e", &[][..]),
    ]);
    for (name, set) in &deps {
        // The test kits are for tests: no product crate, the binary included, links them.
        for kit in ["kv-tests", "sim", "e2e"] {
            assert!(
                name == "sim" || !set.contains(kit),
                "crate {name} depends on the test kit {kit} outside its tests"
            );
        }
        if let Some(ok) = allowed.get(name.as_str()) {
            for d in set {
                assert!(ok.contains(&d.as_str()), "crate {name} must not depend on {d} (allowed: {ok:?})");
            }
        } else {
            assert_eq!(name, "trove", "crate {name} is missing from the dependency rules here and in ARCHITECTURE.md");
        }
    }
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../ARCHITECTURE.md"))
        .expect("ARCHITECTURE.md");
    for name in deps.keys() {
        let dir = dirs.get(name).unwrap_or(name);
        assert!(
            doc.contains(&format!("### crates/{dir}")),
            "ARCHITECTURE.md's code map lacks crates/{dir} (package {name})"
        );
    }
}
