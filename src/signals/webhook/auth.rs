//! The webhook's bearer token: read as Alertmanager's `credentials_file`
//! is, compared in constant time, and followed across a rotation.

use crate::metrics::Metrics;
use crate::metrics::values::Reload;
use crate::signals::SignalError;
use crate::sync::RwLockExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

const MAX_TOKEN_BYTES: usize = 4096;

/// Reads the bearer token the way Alertmanager's `credentials_file` does
/// (surrounding whitespace trimmed), so one Secret serves both sides.
pub fn load_token(path: &Path) -> Result<Arc<[u8]>, SignalError> {
    let err = |reason: String| SignalError::Token {
        path: path.to_path_buf(),
        reason,
    };
    let raw = std::fs::read(path).map_err(|e| err(e.to_string()))?;
    let token = raw.trim_ascii();
    if token.is_empty() {
        return Err(err("is empty".into()));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(err(format!("longer than {MAX_TOKEN_BYTES} bytes")));
    }
    // Anything else could never arrive in an Authorization header, so every
    // request would fail with 401; better to refuse at start.
    if !token.iter().all(|b| b.is_ascii_graphic()) {
        return Err(err("must be printable ASCII without spaces".into()));
    }
    Ok(Arc::from(token))
}

/// The bearer tokens accepted: the current one and, for a grace period
/// after a rotation, the one before it. Pure: the caller passes `now`.
#[derive(Debug)]
pub struct Tokens {
    current: Arc<[u8]>,
    previous: Option<(Arc<[u8]>, Instant)>,
}

impl Tokens {
    pub fn new(current: Arc<[u8]>) -> Self {
        Self {
            current,
            previous: None,
        }
    }

    /// Makes `new` the current token; the replaced one stays accepted until
    /// `now + grace`. `false` (and nothing changes) when `new` is current.
    pub fn rotate(&mut self, new: Arc<[u8]>, now: Instant, grace: Duration) -> bool {
        if new == self.current {
            return false;
        }
        let old = std::mem::replace(&mut self.current, new);
        self.previous = Some((old, now + grace));
        true
    }

    /// Constant time over the bytes of each token; only lengths can leak.
    pub fn accepts(&self, presented: &[u8], now: Instant) -> bool {
        let current = bool::from(presented.ct_eq(&self.current));
        let previous = self
            .previous
            .as_ref()
            .is_some_and(|(t, until)| bool::from(presented.ct_eq(t)) && now < *until);
        current | previous
    }
}

/// Least spacing of the token file reads that unknown tokens cause: a
/// rotated Secret is followed within a second, and a flood of bad tokens
/// reads the file at most once a second.
pub const REREAD_EVERY: Duration = Duration::from_secs(1);

/// When a request with an unknown token gets a fresh look at the file.
#[derive(Debug, PartialEq, Eq)]
pub enum Reread {
    /// A read began after the request arrived: its result is current enough.
    Shared,
    /// Read the file at this time (now, or once `REREAD_EVERY` has passed
    /// since the last read).
    At(tokio::time::Instant),
}

/// Pure: `last` is when the last reread began, `arrived` when the request did.
pub fn reread_plan(
    last: Option<tokio::time::Instant>,
    arrived: tokio::time::Instant,
    every: Duration,
) -> Reread {
    match last {
        Some(last) if last >= arrived => Reread::Shared,
        Some(last) => Reread::At((last + every).max(arrived)),
        None => Reread::At(arrived),
    }
}

/// The outcome of checking a presented token.
#[derive(Debug)]
pub struct TokenCheck {
    pub accepted: bool,
    /// The file was re-read for this request: `Ok(true)` if that rotated
    /// the token.
    pub reread: Option<Result<bool, SignalError>>,
}

/// The token file and the tokens read from it. Alertmanager's side reads
/// the same Secret, so when the Secret rotates, remedy must follow without a
/// restart: a 401 is not retried before the next group_interval, and a
/// resolved notification may never come again (docs/upstream-behaviour.md,
/// "Alertmanager webhook retries"). Hence an unknown token re-reads the file
/// at once (rate-limited), besides the periodic reload.
#[derive(Debug)]
pub struct TokenStore {
    path: Option<PathBuf>,
    /// How long a replaced token is still accepted: one reload period, so
    /// an Alertmanager whose copy of the Secret lags behind keeps working.
    grace: Duration,
    tokens: RwLock<Tokens>,
    /// When the last reread for an unknown token began. The async lock also
    /// serialises those rereads, so requests waiting together share one.
    last_reread: tokio::sync::Mutex<Option<tokio::time::Instant>>,
}

impl TokenStore {
    pub fn fixed(token: Arc<[u8]>) -> Self {
        Self {
            path: None,
            grace: Duration::ZERO,
            tokens: RwLock::new(Tokens::new(token)),
            last_reread: tokio::sync::Mutex::new(None),
        }
    }

    pub fn from_file(path: &Path, grace: Duration) -> Result<Self, SignalError> {
        Ok(Self {
            path: Some(path.to_path_buf()),
            grace,
            tokens: RwLock::new(Tokens::new(load_token(path)?)),
            last_reread: tokio::sync::Mutex::new(None),
        })
    }

    /// Re-reads the file: `Ok(true)` when the token changed. A file that
    /// cannot be read or is invalid changes nothing (it may be mid-update).
    pub fn reload(&self) -> Result<bool, SignalError> {
        let Some(path) = &self.path else {
            return Ok(false);
        };
        let token = load_token(path)?;
        self.rotate(token)
    }

    fn rotate(&self, token: Arc<[u8]>) -> Result<bool, SignalError> {
        let mut t = self.tokens.write_locked();
        Ok(t.rotate(token, Instant::now(), self.grace))
    }

    pub(super) fn accepts(&self, presented: &[u8]) -> bool {
        self.tokens.read_locked().accepts(presented, Instant::now())
    }

    /// Accepts a known token at once. An unknown one may be the rotated
    /// Secret that this side has not read yet: re-read the file, at most
    /// once per `REREAD_EVERY` (the request waits for the next read, at
    /// most that long), and check again.
    pub async fn check(&self, presented: &[u8]) -> TokenCheck {
        if self.accepts(presented) {
            return TokenCheck {
                accepted: true,
                reread: None,
            };
        }
        let Some(path) = self.path.clone() else {
            return TokenCheck {
                accepted: false,
                reread: None,
            };
        };
        let arrived = tokio::time::Instant::now();
        let mut last = self.last_reread.lock().await;
        match reread_plan(*last, arrived, REREAD_EVERY) {
            Reread::Shared => {
                return TokenCheck {
                    accepted: self.accepts(presented),
                    reread: None,
                };
            }
            Reread::At(at) => tokio::time::sleep_until(at).await,
        }
        // Marked before reading: a request arriving during the read may
        // have missed a change the read did not see, so it reads again.
        *last = Some(tokio::time::Instant::now());
        let file = path.clone();
        let read = tokio::task::spawn_blocking(move || load_token(&file))
            .await
            .unwrap_or_else(|e| {
                Err(SignalError::Token {
                    path,
                    reason: format!("reading task failed: {e}"),
                })
            });
        let reread = read.and_then(|token| self.rotate(token));
        drop(last);
        TokenCheck {
            accepted: self.accepts(presented),
            reread: Some(reread),
        }
    }
}

/// Logs and counts a token file read that changed the token or failed
/// (`remedy_webhook_token_reloads_total`); `why` says what caused it.
pub fn record_reload(metrics: &Metrics, result: &Result<bool, SignalError>, why: &'static str) {
    let result = match result {
        Ok(false) => return,
        Ok(true) => {
            tracing::info!(
                trigger = why,
                "webhook token reloaded; the previous one is accepted for one more period"
            );
            Reload::Reloaded
        }
        Err(e) => {
            // Never the token itself: the error names the file only.
            tracing::warn!(error = %e, label = e.label(), trigger = why, "cannot reload the webhook token; keeping the current one");
            Reload::Error
        }
    };
    metrics
        .signals
        .token_reloads
        .get_or_create(&crate::metrics::ReloadLabels { result })
        .inc();
}
