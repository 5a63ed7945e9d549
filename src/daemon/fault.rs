//! Fault injection for tests of the real binary, through the environment
//! variable `REMEDY_TEST_FAULT` (never set it in production):
//! - `engine-panic-after-ticks=N`: the engine task panics at tick N+1, to
//!   show that a dead task takes the process down;
//! - `engine-stall-after-ticks=N`: the engine loop hangs at tick N+1, to
//!   show that /healthz fails when the loop stops.

pub const ENV: &str = "REMEDY_TEST_FAULT";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    PanicAfterTicks(u64),
    StallAfterTicks(u64),
}

impl Fault {
    /// Unknown values are refused loudly: a test that sets a fault must not
    /// pass because it was silently ignored.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (what, n) = s
            .split_once('=')
            .ok_or_else(|| format!("{ENV}={s}: expected WHAT=N"))?;
        let n: u64 = n
            .parse()
            .map_err(|_| format!("{ENV}={s}: N must be a whole number"))?;
        match what {
            "engine-panic-after-ticks" => Ok(Self::PanicAfterTicks(n)),
            "engine-stall-after-ticks" => Ok(Self::StallAfterTicks(n)),
            _ => Err(format!("{ENV}={s}: unknown fault {what}")),
        }
    }

    pub fn from_env() -> Result<Option<Self>, String> {
        match std::env::var(ENV) {
            Ok(v) => Self::parse(&v).map(Some),
            Err(_) => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_nonsense_is_refused() {
        assert_eq!(
            Fault::parse("engine-panic-after-ticks=3"),
            Ok(Fault::PanicAfterTicks(3))
        );
        assert_eq!(
            Fault::parse("engine-stall-after-ticks=0"),
            Ok(Fault::StallAfterTicks(0))
        );
        for bad in ["engine-panic", "engine-panic-after-ticks=x", "other=1"] {
            assert!(Fault::parse(bad).is_err(), "{bad}");
        }
    }
}
