//! File pool policies: which pool (and scheme) a file belongs in, by its path, name, size,
//! owner and the age of its access, modification and change times (PowerScale's file pool
//! policies). The metadata service stores them as one ordered list; the first policy whose
//! every condition holds decides a file, and a file no policy matches stays where it is. A
//! policy without conditions matches every file: it is the default policy, and must be last.
//!
//! The types and their evaluation live here, beside the messages that carry them, because the
//! metadata service checks a policy when it is added, `trove policy test` explains a match,
//! and the data movement that applies policies evaluates them: each reads the same answer from
//! one pure function of a policy, a file's facts and the time.

use crate::types::{check_pool_name, EcScheme, Timestamp};
use serde::{Deserialize, Serialize};

/// Most policies a cluster may have (each file is checked against them in order).
pub const POLICIES_MAX: usize = 256;
/// Longest glob pattern of a policy.
pub const POLICY_GLOB_BYTES_MAX: usize = 1024;

/// The coarsest an atime gets: relatime's day (a read always moves an atime this old).
pub const ATIME_LAG_MAX_S: i64 = 24 * 3600;

/// How old a file's atime may get before a read moves it: relatime's day, or half the
/// shortest age a policy judges atimes by (at least a second), so that such a policy sees every
/// file read within half its age as read. The metadata service applies it; clients use it to
/// skip reads there is nothing to record for.
pub fn atime_lag_s(policies: &[FilePolicy]) -> i64 {
    policies
        .iter()
        .flat_map(|p| [p.rule.atime_age_s_min, p.rule.atime_age_s_max])
        .flatten()
        .map(|age| i64::try_from(age / 2).unwrap_or(i64::MAX).max(1))
        .fold(ATIME_LAG_MAX_S, i64::min)
}

/// Whether a read at `now` moves atime `atime` of a file last written at `mtime` and changed
/// at `ctime`: relatime's rule (an atime not later than the mtime or ctime, or older than
/// `lag_s`), with the lag of [`atime_lag_s`].
pub fn atime_due(atime: Timestamp, mtime: Timestamp, ctime: Timestamp, now: Timestamp, lag_s: i64) -> bool {
    atime <= mtime || atime <= ctime || atime.secs.saturating_add(lag_s) <= now.secs
}

/// One file pool policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilePolicy {
    /// Unique among policies; the same characters as pool names.
    pub name: String,
    pub rule: PolicyRule,
    pub action: PolicyAction,
}

/// The conditions of a policy; every one given must hold (none given: every file matches).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRule {
    /// A glob over the file's absolute path: `*` and `?` stay within one path component, `**`
    /// spans any number of them (`/datasets/**/*.tar`).
    pub path_glob: Option<String>,
    /// A glob over the file's name (its last component): `*.jpg`, `train-??.tar`.
    pub name_glob: Option<String>,
    /// Size range in bytes, both ends included.
    pub size_bytes_min: Option<u64>,
    pub size_bytes_max: Option<u64>,
    /// The owner's user id.
    pub uid: Option<u32>,
    /// Matches files last read at least this long ago (atime, as the mount keeps it).
    pub atime_age_s_min: Option<u64>,
    /// Matches files read within this long (atime): what recalls files that are read again.
    pub atime_age_s_max: Option<u64>,
    /// Matches files last written at least this long ago (mtime).
    pub mtime_age_s_min: Option<u64>,
    /// Matches files whose attributes last changed at least this long ago (ctime).
    pub ctime_age_s_min: Option<u64>,
}

/// What a policy does with the files it matches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyAction {
    /// The pool the files belong in (by name).
    pub pool: String,
    /// The scheme they are coded in there (`None`: the pool's default scheme).
    pub ec: Option<EcScheme>,
}

/// What a policy is evaluated against: a file as the metadata service describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileFacts<'a> {
    /// Absolute path.
    pub path: &'a str,
    pub size: u64,
    pub uid: u32,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
}

/// How one condition of a policy judged a file: the condition and the file's value, in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    pub holds: bool,
    pub why: String,
}

impl PolicyRule {
    /// Whether the rule has no condition (it matches every file).
    pub fn is_empty(&self) -> bool {
        *self == PolicyRule::default()
    }
}

impl FilePolicy {
    /// Checks the policy's name, globs, ranges and scheme; the error says what is wrong.
    pub fn check(&self) -> Result<(), String> {
        check_pool_name(&self.name).map_err(|e| e.replacen("pool name", "policy name", 1))?;
        check_pool_name(&self.action.pool).map_err(|e| format!("policy {:?}: {e}", self.name))?;
        for (what, glob) in [("path", &self.rule.path_glob), ("name", &self.rule.name_glob)] {
            let Some(glob) = glob else { continue };
            if glob.is_empty() || glob.len() > POLICY_GLOB_BYTES_MAX {
                return Err(format!(
                    "policy {:?}: the {what} glob must be 1 to {POLICY_GLOB_BYTES_MAX} bytes long",
                    self.name
                ));
            }
            if what == "path" && !glob.starts_with('/') {
                return Err(format!(
                    "policy {:?}: the path glob {glob:?} must be absolute (start with '/'); to match names anywhere use a name glob",
                    self.name
                ));
            }
            if what == "name" && glob.contains('/') {
                return Err(format!(
                    "policy {:?}: the name glob {glob:?} contains '/'; a name glob matches the last component of a path (use a path glob for directories)",
                    self.name
                ));
            }
        }
        if let (Some(min), Some(max)) = (self.rule.size_bytes_min, self.rule.size_bytes_max) {
            if min > max {
                return Err(format!(
                    "policy {:?}: the smallest size ({min} bytes) is larger than the largest ({max} bytes)",
                    self.name
                ));
            }
        }
        if let (Some(min), Some(max)) = (self.rule.atime_age_s_min, self.rule.atime_age_s_max) {
            if min > max {
                return Err(format!(
                    "policy {:?}: no file can be last read at least {min} s and at most {max} s ago",
                    self.name
                ));
            }
        }
        if let Some(ec) = self.action.ec {
            ec.validate().map_err(|e| format!("policy {:?}: {e}", self.name))?;
        }
        Ok(())
    }

    /// Judges `file` by every condition of the policy at time `now`, in the order of
    /// [`PolicyRule`]'s fields; the policy matches when every judgement holds.
    pub fn judge(&self, file: &FileFacts<'_>, now: Timestamp) -> Vec<Judgement> {
        let rule = &self.rule;
        let mut out = Vec::new();
        let mut push = |holds: bool, why: String| out.push(Judgement { holds, why });
        if let Some(glob) = &rule.path_glob {
            let holds = glob_matches(glob, file.path);
            push(holds, format!("path {:?} {} {glob:?}", file.path, if holds { "matches" } else { "does not match" }));
        }
        if let Some(glob) = &rule.name_glob {
            let name = file.path.rsplit('/').next().unwrap_or(file.path);
            let holds = glob_matches(glob, name);
            push(holds, format!("name {name:?} {} {glob:?}", if holds { "matches" } else { "does not match" }));
        }
        if let Some(min) = rule.size_bytes_min {
            push(
                file.size >= min,
                format!("size {} bytes {} {min}", file.size, if file.size >= min { ">=" } else { "<" }),
            );
        }
        if let Some(max) = rule.size_bytes_max {
            push(
                file.size <= max,
                format!("size {} bytes {} {max}", file.size, if file.size <= max { "<=" } else { ">" }),
            );
        }
        if let Some(uid) = rule.uid {
            push(
                file.uid == uid,
                format!("owner uid {} {} {uid}", file.uid, if file.uid == uid { "is" } else { "is not" }),
            );
        }
        let ages = [
            ("last read", file.atime, rule.atime_age_s_min, true),
            ("last read", file.atime, rule.atime_age_s_max, false),
            ("last written", file.mtime, rule.mtime_age_s_min, true),
            ("last changed", file.ctime, rule.ctime_age_s_min, true),
        ];
        for (what, at, limit, at_least) in ages {
            let Some(limit) = limit else { continue };
            let age = age_s(at, now);
            let holds = if at_least { age >= limit } else { age <= limit };
            let relation = match (at_least, holds) {
                (true, true) => "at least",
                (true, false) => "less than",
                (false, true) => "at most",
                (false, false) => "more than",
            };
            push(holds, format!("{what} {age} s ago, {relation} {limit} s"));
        }
        out
    }

    /// Whether `file` matches every condition at time `now`.
    pub fn matches(&self, file: &FileFacts<'_>, now: Timestamp) -> bool {
        self.judge(file, now).iter().all(|j| j.holds)
    }
}

/// The first policy of `policies` that `file` matches, with its index.
pub fn first_match<'p>(
    policies: &'p [FilePolicy],
    file: &FileFacts<'_>,
    now: Timestamp,
) -> Option<(usize, &'p FilePolicy)> {
    policies.iter().enumerate().find(|(_, p)| p.matches(file, now))
}

/// Whole seconds from `at` to `now` (0 for times in the future: a clock set back, or a time a
/// client set ahead).
fn age_s(at: Timestamp, now: Timestamp) -> u64 {
    u64::try_from(now.secs.saturating_sub(at.secs)).unwrap_or(0)
}

/// Matches `text` against a glob: `?` is one character and `*` any run of characters other
/// than `/`, `**` any run including `/` (so `/a/**/x` matches `/a/x` and `/a/b/c/x`), `\`
/// escapes the next character; everything else matches itself.
pub fn glob_matches(glob: &str, text: &str) -> bool {
    let pattern: Vec<char> = glob.chars().collect();
    let text: Vec<char> = text.chars().collect();
    matches_from(&pattern, &text)
}

fn matches_from(p: &[char], t: &[char]) -> bool {
    match p.first() {
        None => t.is_empty(),
        Some('*') if p.get(1) == Some(&'*') => {
            // `**/` also matches nothing at all, so `/a/**/x` matches `/a/x`.
            let rest = &p[2..];
            if rest.first() == Some(&'/') && matches_from(&rest[1..], t) {
                return true;
            }
            (0..=t.len()).any(|skip| matches_from(rest, &t[skip..]))
        }
        Some('*') => {
            let rest = &p[1..];
            for skip in 0..=t.len() {
                if matches_from(rest, &t[skip..]) {
                    return true;
                }
                if t.get(skip) == Some(&'/') {
                    return false;
                }
            }
            false
        }
        Some('?') => matches!(t.first(), Some(c) if *c != '/') && matches_from(&p[1..], &t[1..]),
        Some('\\') if p.len() > 1 => t.first() == Some(&p[1]) && matches_from(&p[2..], &t[1..]),
        Some(c) => t.first() == Some(c) && matches_from(&p[1..], &t[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_atime_lag_is_a_day_or_half_the_shortest_access_age() {
        let policy = |min: Option<u64>, max: Option<u64>| FilePolicy {
            name: "p".into(),
            rule: PolicyRule { atime_age_s_min: min, atime_age_s_max: max, ..PolicyRule::default() },
            action: PolicyAction { pool: "hdd".into(), ec: None },
        };
        assert_eq!(atime_lag_s(&[]), ATIME_LAG_MAX_S);
        assert_eq!(atime_lag_s(&[policy(None, None)]), ATIME_LAG_MAX_S);
        assert_eq!(atime_lag_s(&[policy(Some(30), None), policy(None, Some(3600))]), 15);
        assert_eq!(atime_lag_s(&[policy(None, Some(1))]), 1);
        assert_eq!(atime_lag_s(&[policy(Some(7 * 86400), None)]), ATIME_LAG_MAX_S);
        let t = |secs| Timestamp { secs, nanos: 0 };
        // Read after a write: moves. Read again within the lag: does not; after it: moves.
        assert!(atime_due(t(100), t(100), t(100), t(101), 15));
        assert!(!atime_due(t(101), t(100), t(100), t(115), 15));
        assert!(atime_due(t(101), t(100), t(100), t(116), 15));
    }

    #[test]
    fn globs_keep_single_stars_within_a_component() {
        assert!(glob_matches("*.jpg", "a.jpg"));
        assert!(!glob_matches("*.jpg", "a.jpeg"));
        assert!(glob_matches("train-??.tar", "train-07.tar"));
        assert!(!glob_matches("train-??.tar", "train-7.tar"));
        assert!(glob_matches("/data/*/x", "/data/a/x"));
        assert!(!glob_matches("/data/*/x", "/data/a/b/x"));
        assert!(glob_matches("/data/**/x", "/data/a/b/x"));
        assert!(glob_matches("/data/**/x", "/data/x"));
        assert!(glob_matches("/data/**", "/data/a/b"));
        assert!(!glob_matches("/data/**", "/other/a"));
        assert!(glob_matches("/a\\*b", "/a*b"));
        assert!(!glob_matches("/a\\*b", "/axb"));
        assert!(glob_matches("/fläsh/*", "/fläsh/ü"));
    }

    fn facts(path: &str, size: u64, atime_s: i64) -> FileFacts<'_> {
        let t = |secs| Timestamp { secs, nanos: 0 };
        FileFacts { path, size, uid: 1000, atime: t(atime_s), mtime: t(500), ctime: t(500) }
    }

    fn policy(name: &str, rule: PolicyRule, pool: &str) -> FilePolicy {
        FilePolicy { name: name.into(), rule, action: PolicyAction { pool: pool.into(), ec: None } }
    }

    #[test]
    fn the_first_policy_whose_conditions_all_hold_decides() {
        let now = Timestamp { secs: 10_000, nanos: 0 };
        let policies = vec![
            policy("small", PolicyRule { size_bytes_max: Some(4096), ..Default::default() }, "flash"),
            policy(
                "cold",
                PolicyRule { path_glob: Some("/data/**".into()), atime_age_s_min: Some(3600), ..Default::default() },
                "hdd",
            ),
            policy("rest", PolicyRule::default(), "flash"),
        ];
        let name = |f: &FileFacts<'_>| first_match(&policies, f, now).map(|(_, p)| p.name.clone());
        assert_eq!(name(&facts("/data/a.bin", 100, 0)).as_deref(), Some("small"));
        assert_eq!(name(&facts("/data/a.bin", 1 << 20, 0)).as_deref(), Some("cold"));
        assert_eq!(name(&facts("/data/a.bin", 1 << 20, 9_000)).as_deref(), Some("rest"));
        assert_eq!(name(&facts("/home/a.bin", 1 << 20, 0)).as_deref(), Some("rest"));
        let why = policies[1].judge(&facts("/data/a.bin", 1 << 20, 9_000), now);
        assert_eq!(
            why,
            vec![
                Judgement { holds: true, why: "path \"/data/a.bin\" matches \"/data/**\"".into() },
                Judgement { holds: false, why: "last read 1000 s ago, less than 3600 s".into() },
            ]
        );
    }

    #[test]
    fn bad_policies_are_refused_with_the_reason() {
        let err = |rule: PolicyRule| policy("p", rule, "hdd").check().err().unwrap_or_default();
        assert!(
            err(PolicyRule { path_glob: Some("data/**".into()), ..Default::default() }).contains("must be absolute")
        );
        assert!(err(PolicyRule { name_glob: Some("a/*.jpg".into()), ..Default::default() }).contains("contains '/'"));
        assert!(err(PolicyRule { size_bytes_min: Some(10), size_bytes_max: Some(5), ..Default::default() })
            .contains("larger than"));
        assert!(err(PolicyRule { atime_age_s_min: Some(10), atime_age_s_max: Some(5), ..Default::default() })
            .contains("no file"));
        assert!(policy("a b", PolicyRule::default(), "hdd").check().err().unwrap_or_default().contains("policy name"));
        assert!(policy("p", PolicyRule::default(), "").check().is_err());
        assert!(policy("p", PolicyRule::default(), "hdd").check().is_ok());
    }
}
