//! Reading `…_secs` and `…_ms` settings: a whole number, or a duration written out.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Unexpected, Visitor};

/// Reads a `…_secs` setting: a number of seconds, or a duration written out that is a whole
/// number of them.
pub(super) fn secs<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(Count {
        unit: Duration::from_secs(1),
        name: "seconds",
    })
}

/// Reads a `…_ms` setting: a number of milliseconds, or a duration written out that is a
/// whole number of them.
pub(super) fn millis<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(Count {
        unit: Duration::from_millis(1),
        name: "milliseconds",
    })
}

/// A count of `unit`s, given as a number or as a duration.
struct Count {
    unit: Duration,
    name: &'static str,
}

impl Visitor<'_> for Count {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "a number of {} or a duration such as \"30s\", \"5m\" or \"1h 30m\"",
            self.name
        )
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        let duration = humantime::parse_duration(v)
            .map_err(|err| E::custom(format_args!("{v:?} is not a duration ({err})")))?;
        let unit = self.unit.as_nanos();
        if duration.as_nanos() % unit != 0 {
            return Err(E::custom(format_args!(
                "{v:?} is not a whole number of {}",
                self.name
            )));
        }
        u64::try_from(duration.as_nanos() / unit)
            .map_err(|_| E::custom(format_args!("{v:?} is too long")))
    }
}
