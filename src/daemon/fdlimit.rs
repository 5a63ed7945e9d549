//! The open-file limit. Every connection to the listener is a file
//! descriptor, so a soft `RLIMIT_NOFILE` below `http.max_connections` makes
//! `accept` fail with EMFILE before remedy's own limit applies: /healthz
//! could not connect and the pod was restarted (issue #22, a limit of 256).

/// Descriptors besides the listener's connections: measured 12 idle
/// (listener, epoll, signal pipe, stdio, log) plus headroom for outgoing
/// connections (Prometheus, Alertmanager, Lease, episode record), file
/// reads (token, certificates) and the connection accepted only to be
/// refused at `http.max_connections`.
pub const RESERVE: u64 = 64;

/// Above this remedy never raises the soft limit: Linux's default
/// `fs.nr_open`, where an unlimited hard limit would make setrlimit fail.
const RAISE_CAP: u64 = 1 << 20;

/// Descriptors remedy needs: one per listener connection, one per watch
/// stream (each is its own HTTP/1 connection to the apiserver) and
/// [`RESERVE`].
pub fn needed(max_connections: usize, watch_streams: usize) -> u64 {
    (max_connections as u64)
        .saturating_add(watch_streams as u64)
        .saturating_add(RESERVE)
}

/// What to do at start about the soft limit.
#[derive(Debug, PartialEq, Eq)]
pub struct Adjustment {
    /// Raise the soft limit to this (the hard limit, as Go's runtime and
    /// many servers do): it costs nothing until descriptors are used.
    pub raise_to: Option<u64>,
    /// Even after raising, fewer than needed: warn.
    pub short: bool,
}

/// Pure: the limits as getrlimit reports them.
pub fn adjust(soft: u64, hard: u64, needed: u64) -> Adjustment {
    let target = hard.min(RAISE_CAP);
    let raise_to = (target > soft).then_some(target);
    Adjustment {
        raise_to,
        short: raise_to.unwrap_or(soft) < needed,
    }
}

/// Raises the soft limit to the hard one and warns when the result is still
/// below `needed`. Errors are logged, never fatal: remedy still runs with a
/// low limit, as before.
#[cfg(unix)]
pub fn ensure(needed: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "cannot read the open-file limit");
        return;
    }
    let (soft, hard) = (lim.rlim_cur, lim.rlim_max);
    let p = adjust(soft, hard, needed);
    let mut have = soft;
    if let Some(to) = p.raise_to {
        lim.rlim_cur = to;
        // SAFETY: setrlimit only reads the struct passed.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
            tracing::debug!(
                from = soft,
                to,
                "raised the open-file soft limit to the hard limit"
            );
            have = to;
        } else {
            tracing::warn!(error = %std::io::Error::last_os_error(), soft, hard, "cannot raise the open-file soft limit");
        }
    }
    if have < needed {
        tracing::warn!(
            limit = have,
            hard,
            needed,
            "open-file limit (RLIMIT_NOFILE) below what http.max_connections and the watches need: \
             at the limit new connections, probes included, fail; raise the container's nofile \
             limit or lower http.max_connections (docs/evidence/measurements.md)"
        );
    }
}

#[cfg(not(unix))]
pub fn ensure(_needed: u64) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needed_counts_connections_watches_and_a_reserve() {
        // The defaults: 2048 connections, six built-in profiles.
        assert_eq!(needed(2048, 6), 2048 + 6 + RESERVE);
        assert_eq!(needed(10, 0), 10 + RESERVE);
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one_and_a_shortfall_is_reported() {
        let need = needed(2048, 6);
        // The case from the issue: 256 everywhere, nothing to raise.
        assert_eq!(
            adjust(256, 256, need),
            Adjustment {
                raise_to: None,
                short: true
            }
        );
        // Docker's usual 1024 soft, 524288 hard: raised, enough.
        assert_eq!(
            adjust(1024, 524_288, need),
            Adjustment {
                raise_to: Some(524_288),
                short: false
            }
        );
        // Raised, but the hard limit is still too low.
        assert_eq!(
            adjust(256, 1024, need),
            Adjustment {
                raise_to: Some(1024),
                short: true
            }
        );
        // Enough already and nothing to raise.
        assert_eq!(
            adjust(1 << 20, 1 << 20, need),
            Adjustment {
                raise_to: None,
                short: false
            }
        );
        // An unlimited hard limit is capped where Linux accepts it.
        assert_eq!(
            adjust(1024, u64::MAX, need),
            Adjustment {
                raise_to: Some(RAISE_CAP),
                short: false
            }
        );
        // Exactly enough is enough.
        assert!(!adjust(need, need, need).short && adjust(need - 1, need - 1, need).short);
    }
}
