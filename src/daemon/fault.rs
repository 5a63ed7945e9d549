//! Fault injection for tests of the real binary, through the environment
//! variable `REMEDY_TEST_FAULT`:
//! - `engine-panic-after-ticks=N`: the engine task panics at tick N+1, to
//!   show that a dead task takes the process down;
//! - `engine-stall-after-ticks=N`: the engine loop hangs at tick N+1, to
//!   show that /healthz fails when the loop stops.
//!
//! Compiled only with the cargo feature `test-faults`, which the crate's
//! dev-dependency on itself turns on for `cargo test` (and clippy, benches
//! and examples), the `remedy` binary the integration tests run included.
//! `cargo build` and the image (scripts/image, the Dockerfile) build
//! without it: there [`Faults`] is empty, reads no environment and its
//! [`Faults::at_tick`] does nothing, so the shipped binary cannot be made
//! to panic or stall this way (scripts/image checks that the variable's
//! name is not in the binary).

#[cfg(feature = "test-faults")]
pub use injected::*;

#[cfg(not(feature = "test-faults"))]
pub use shipped::*;

#[cfg(not(feature = "test-faults"))]
mod shipped {
    /// The shipped build's faults: none.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Faults;

    impl Faults {
        pub fn from_env() -> Self {
            Self
        }

        #[inline(always)]
        pub async fn at_tick(&self, _tick: u64) {}
    }
}

#[cfg(feature = "test-faults")]
mod injected {
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
    }

    /// The fault the engine was started with, if any.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct Faults(Option<Fault>);

    impl Faults {
        pub fn from_env() -> Self {
            match std::env::var(ENV) {
                Ok(v) => match Fault::parse(&v) {
                    Ok(f) => Self(Some(f)),
                    Err(e) => {
                        tracing::error!("{e}: no fault injected");
                        Self(None)
                    }
                },
                Err(_) => Self(None),
            }
        }

        /// Called by the engine at the start of tick `n` (1 for the first).
        pub async fn at_tick(&self, n: u64) {
            match self.0 {
                Some(Fault::PanicAfterTicks(k)) if n > k => {
                    panic!("injected fault ({ENV}): engine panics at tick {n}")
                }
                Some(Fault::StallAfterTicks(k)) if n > k => {
                    tracing::warn!(tick = n, "injected fault: the engine loop stalls");
                    std::future::pending::<()>().await;
                }
                _ => {}
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
}
