//! `DUR` arguments (`500ms`, `10s`, `2m`, `1h`, `1.5s`) and the human durations `zkr` prints.

use std::time::Duration;

/// Parses a duration with a unit: `ms`, `s`, `m` or `h`. Used as a clap value parser.
pub fn parse(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{text:?} has no unit: write it like 500ms, 10s or 2m"))?;
    let (number, unit) = s.split_at(split);
    let value: f64 = number
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && !number.is_empty())
        .ok_or_else(|| format!("{text:?} is not a duration: write it like 500ms, 10s or 2m"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(format!(
                "{text:?} has an unknown unit {unit:?}: use ms, s, m or h (500ms, 10s, 2m)"
            ))
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{text:?} is out of range"))
}

/// Parses a timeout: a duration from 100ms to 1h (the range the session accepts).
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    let d = parse(text)?;
    if d < Duration::from_millis(100) || d > Duration::from_secs(3600) {
        return Err(format!(
            "{text:?} is out of range: give a timeout from 100ms to 1h, like 10s"
        ));
    }
    Ok(d)
}

/// A short human form: `850ms`, `4.2s`, `12s`, `3m04s`, `1h02m`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 10_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else if ms < 60_000 {
        format!("{}s", d.as_secs())
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
    } else {
        format!("{}h{:02}m", d.as_secs() / 3600, (d.as_secs() / 60) % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse(" 3s "), Ok(Duration::from_secs(3)));
    }

    #[test]
    fn rejects_the_rest() {
        for bad in ["", "10", "s", "10x", "-1s", "1.2.3s", "10 s", "ms"] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(parse("10").unwrap_err().contains("no unit"));
    }

    #[test]
    fn timeouts_are_in_range() {
        assert_eq!(parse_timeout("2s"), Ok(Duration::from_secs(2)));
        for bad in ["0s", "0ms", "99ms", "2h"] {
            let err = parse_timeout(bad).unwrap_err();
            assert!(err.contains("out of range"), "{bad}: {err}");
        }
    }

    #[test]
    fn human_forms() {
        assert_eq!(human(Duration::from_millis(850)), "850ms");
        assert_eq!(human(Duration::from_millis(4230)), "4.2s");
        assert_eq!(human(Duration::from_secs(12)), "12s");
        assert_eq!(human(Duration::from_secs(184)), "3m04s");
        assert_eq!(human(Duration::from_secs(3720)), "1h02m");
    }
}
