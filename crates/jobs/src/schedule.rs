//! When jobs run by themselves: "daily HH:MM" and impact windows "HH:MM-HH:MM" in UTC,
//! "every N" (s, m, h) for short intervals, or "off". Pure functions of the wall clock in
//! milliseconds, so they are tested without waiting.

/// A parsed schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    Off,
    /// Every day at this many minutes after midnight UTC.
    Daily {
        minute: u32,
    },
    /// Every this many milliseconds after the last scheduled start.
    Every {
        ms: u64,
    },
}

const DAY_MS: u64 = 24 * 3600 * 1000;

fn parse_hhmm(text: &str) -> Result<u32, String> {
    let (h, m) = text.split_once(':').ok_or_else(|| format!("{text:?} is not a time of day (HH:MM)"))?;
    let (h, m): (u32, u32) = match (h.parse(), m.parse()) {
        (Ok(h), Ok(m)) if h < 24 && m < 60 && m_len_ok(text) => (h, m),
        _ => return Err(format!("{text:?} is not a time of day (HH:MM, 00:00 to 23:59)")),
    };
    Ok(h * 60 + m)
}

fn m_len_ok(text: &str) -> bool {
    text.split_once(':').is_some_and(|(_, m)| m.len() == 2)
}

impl Schedule {
    /// Parses "daily HH:MM", "every N[s|m|h]" or "off".
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let text = text.trim();
        if text == "off" {
            return Ok(Schedule::Off);
        }
        if let Some(at) = text.strip_prefix("daily ") {
            return Ok(Schedule::Daily { minute: parse_hhmm(at.trim())? });
        }
        if let Some(every) = text.strip_prefix("every ") {
            let every = every.trim();
            let (digits, unit_ms) = match every.as_bytes().last() {
                Some(b's') => (&every[..every.len() - 1], 1000),
                Some(b'm') => (&every[..every.len() - 1], 60_000),
                Some(b'h') => (&every[..every.len() - 1], 3_600_000),
                _ => (every, 1000),
            };
            return match digits.parse::<u64>() {
                Ok(n) if n > 0 => Ok(Schedule::Every { ms: n.saturating_mul(unit_ms) }),
                _ => Err(format!("{every:?} is not a positive interval (e.g. 30s, 10m, 6h)")),
            };
        }
        Err(format!("{text:?} is not a schedule: \"daily HH:MM\" (UTC), \"every N\" with N in s, m or h, or \"off\""))
    }

    /// The first scheduled start after `last_ms` (the last scheduled start; 0: none) that is
    /// due by `now_ms`, if any; and the next one after `now_ms`.
    pub fn due(&self, last_ms: u64, now_ms: u64) -> (bool, u64) {
        match *self {
            Schedule::Off => (false, 0),
            Schedule::Every { ms } => {
                if last_ms == 0 {
                    // First sight of the schedule: the first run is one interval away.
                    return (false, now_ms + ms);
                }
                let next = last_ms.saturating_add(ms);
                if next <= now_ms {
                    (true, now_ms + ms)
                } else {
                    (false, next)
                }
            }
            Schedule::Daily { minute } => {
                let offset = u64::from(minute) * 60_000;
                // The latest scheduled time at or before now.
                let today = now_ms - now_ms % DAY_MS + offset;
                let latest = if today <= now_ms { today } else { today - DAY_MS };
                let next = latest + DAY_MS;
                // Due when that time came after the last scheduled start (a run missed while
                // no server led is made up, once).
                (last_ms != 0 && last_ms < latest, next)
            }
        }
    }

    pub fn describe(&self) -> String {
        match *self {
            Schedule::Off => "off".into(),
            Schedule::Daily { minute } => {
                format!("daily {:02}:{:02} UTC", minute / 60, minute % 60)
            }
            Schedule::Every { ms } => format!("every {} s", ms / 1000),
        }
    }
}

/// Hours of the day (UTC) when jobs run gentler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    from_minute: u32,
    to_minute: u32,
}

impl Window {
    /// Parses "HH:MM-HH:MM" (a window may span midnight: "22:00-06:00").
    pub fn parse(text: &str) -> Result<Window, String> {
        let (from, to) = text
            .trim()
            .split_once('-')
            .ok_or_else(|| format!("{text:?} is not a window of hours (HH:MM-HH:MM, UTC)"))?;
        Ok(Window { from_minute: parse_hhmm(from.trim())?, to_minute: parse_hhmm(to.trim())? })
    }

    /// Whether `now_ms` falls in the window.
    pub fn contains(&self, now_ms: u64) -> bool {
        let minute = ((now_ms % DAY_MS) / 60_000) as u32;
        if self.from_minute <= self.to_minute {
            (self.from_minute..self.to_minute).contains(&minute)
        } else {
            minute >= self.from_minute || minute < self.to_minute
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: u64 = 3_600_000;

    #[test]
    fn schedules_parse_and_refuse_with_the_reason() {
        assert_eq!(Schedule::parse("daily 22:00"), Ok(Schedule::Daily { minute: 22 * 60 }));
        assert_eq!(Schedule::parse("every 30s"), Ok(Schedule::Every { ms: 30_000 }));
        assert_eq!(Schedule::parse("every 2h"), Ok(Schedule::Every { ms: 2 * H }));
        assert_eq!(Schedule::parse("off"), Ok(Schedule::Off));
        assert!(Schedule::parse("daily 24:00").unwrap_err().contains("time of day"));
        assert!(Schedule::parse("daily 7:5").is_err());
        assert!(Schedule::parse("every 0s").unwrap_err().contains("positive"));
        assert!(Schedule::parse("weekly").unwrap_err().contains("not a schedule"));
    }

    #[test]
    fn daily_runs_once_a_day_after_its_time_and_makes_up_a_missed_one_once() {
        let s = Schedule::Daily { minute: 22 * 60 };
        let day = 20_000 * 24 * H;
        // Never run: the first sight records nothing as due (the runner records it as seen).
        assert!(!s.due(0, day + 23 * H).0);
        // Last run yesterday 22:00; today 21:59 not due, 22:00 due, next tomorrow 22:00.
        let yesterday = day - 2 * H;
        assert_eq!(s.due(yesterday, day + 22 * H - 60_000), (false, day + 22 * H));
        assert_eq!(s.due(yesterday, day + 22 * H), (true, day + 46 * H));
        // Ran today at 22:00: not due again until tomorrow.
        assert!(!s.due(day + 22 * H, day + 23 * H).0);
        // Missed three days: due once.
        assert!(s.due(yesterday - 72 * H, day + 23 * H).0);
    }

    #[test]
    fn every_runs_an_interval_after_the_last_start() {
        let s = Schedule::Every { ms: 30_000 };
        assert_eq!(s.due(0, 1_000_000), (false, 1_030_000));
        assert_eq!(s.due(1_000_000, 1_029_999), (false, 1_030_000));
        assert_eq!(s.due(1_000_000, 1_030_000), (true, 1_060_000));
        assert_eq!(Schedule::Off.due(5, 10), (false, 0));
    }

    #[test]
    fn windows_span_midnight() {
        let day = 20_000 * 24 * H;
        let w = Window::parse("08:00-18:00").unwrap();
        assert!(
            w.contains(day + 8 * H)
                && w.contains(day + 17 * H)
                && !w.contains(day + 18 * H)
                && !w.contains(day + 7 * H)
        );
        let night = Window::parse("22:00-06:00").unwrap();
        assert!(night.contains(day + 23 * H) && night.contains(day + H) && !night.contains(day + 12 * H));
        assert!(Window::parse("8-18").is_err());
    }
}
