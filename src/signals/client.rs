//! How remedy reaches a signal source that sits behind auth: OpenShift's
//! thanos-querier (bearer token), Mimir/Cortex tenants (`X-Scope-OrgID`),
//! basic auth, a private CA. Secrets are files, re-read on every request,
//! so a rotated Secret is used without a restart and never logged.

use super::SignalError;
use crate::config::SourceClient;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::path::Path;
use std::time::Duration;

/// A client for one source, with its CA and fixed headers, and the
/// credentials applied per request.
#[derive(Clone, Debug)]
pub struct SourceHttp {
    target: &'static str,
    pub client: reqwest::Client,
    settings: SourceClient,
}

impl SourceHttp {
    pub fn new(
        target: &'static str,
        settings: &SourceClient,
        timeout: Duration,
    ) -> Result<Self, SignalError> {
        let mut headers = HeaderMap::new();
        for (k, v) in &settings.headers {
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(v),
            ) else {
                return Err(SignalError::InvalidInput(format!(
                    "{target}: header {k:?} is invalid"
                )));
            };
            headers.insert(name, value);
        }
        let mut b = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(crate::USER_AGENT)
            .default_headers(headers);
        if let Some(ca) = &settings.ca_file {
            let pem = std::fs::read(ca).map_err(|e| credential(target, ca, &e.to_string()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| credential(target, ca, &e.to_string()))?;
            if certs.is_empty() {
                return Err(credential(target, ca, "no PEM certificate in it"));
            }
            for c in certs {
                b = b.add_root_certificate(c);
            }
        }
        Ok(Self {
            target,
            client: b.build().map_err(SignalError::Client)?,
            settings: settings.clone(),
        })
    }

    /// Adds the credentials, read from their files now.
    pub async fn authorize(
        &self,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder, SignalError> {
        if let Some(path) = &self.settings.bearer_token_file {
            let token = read_secret(self.target, path).await?;
            return Ok(req.bearer_auth(token));
        }
        if let Some(b) = &self.settings.basic_auth {
            let password = match &b.password_file {
                Some(p) => Some(read_secret(self.target, p).await?),
                None => None,
            };
            return Ok(req.basic_auth(&b.username, password));
        }
        Ok(req)
    }
}

fn credential(target: &'static str, path: &Path, reason: &str) -> SignalError {
    SignalError::Credentials {
        target,
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

/// The file's content without surrounding whitespace (Secrets written with
/// `echo` end in a newline); empty is an error, never an empty password.
async fn read_secret(target: &'static str, path: &Path) -> Result<String, SignalError> {
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|e| credential(target, path, &e.to_string()))?;
    let s = text.trim();
    if s.is_empty() {
        return Err(credential(target, path, "empty"));
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BasicAuth;
    use reqwest::header::AUTHORIZATION;

    #[test]
    fn settings_are_checked_before_use() {
        let ok = SourceClient {
            headers: [("X-Scope-OrgID".to_string(), "tenant-1".to_string())].into(),
            ..SourceClient::default()
        };
        ok.check("signals.prometheus").unwrap();
        let both = SourceClient {
            bearer_token_file: Some("/t".into()),
            basic_auth: Some(BasicAuth {
                username: "u".into(),
                password_file: None,
            }),
            ..SourceClient::default()
        };
        assert!(both.check("s").unwrap_err().contains("exclusive"));
        let auth_header = SourceClient {
            headers: [("authorization".to_string(), "Bearer x".to_string())].into(),
            ..SourceClient::default()
        };
        assert!(
            auth_header
                .check("s")
                .unwrap_err()
                .contains("bearer_token_file")
        );
        let bad_name = SourceClient {
            headers: [("bad header".to_string(), "x".to_string())].into(),
            ..SourceClient::default()
        };
        assert!(bad_name.check("s").unwrap_err().contains("header name"));
        let bad_value = SourceClient {
            headers: [("X-A".to_string(), "a\nb".to_string())].into(),
            ..SourceClient::default()
        };
        assert!(bad_value.check("s").unwrap_err().contains("header value"));
    }

    #[tokio::test]
    async fn secrets_are_read_per_request_trimmed_and_never_empty() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "first\n").unwrap();
        let s = SourceClient {
            bearer_token_file: Some(token.clone()),
            ..SourceClient::default()
        };
        let http = SourceHttp::new("prometheus", &s, Duration::from_secs(1)).unwrap();
        let auth = |http: SourceHttp| async move {
            let req = http
                .authorize(http.client.get("http://127.0.0.1:9/"))
                .await?
                .build()
                .unwrap();
            Ok::<_, SignalError>(req.headers()[AUTHORIZATION].to_str().unwrap().to_string())
        };
        assert_eq!(auth(http.clone()).await.unwrap(), "Bearer first");
        std::fs::write(&token, "rotated").unwrap();
        assert_eq!(auth(http.clone()).await.unwrap(), "Bearer rotated");
        std::fs::write(&token, "  \n").unwrap();
        let e = auth(http.clone()).await.unwrap_err();
        assert_eq!(e.label(), "credentials");
        assert!(!e.to_string().contains("rotated"), "no secret in errors");
        let missing_ca = SourceClient {
            ca_file: Some(dir.path().join("nope.crt")),
            ..SourceClient::default()
        };
        let e = SourceHttp::new("prometheus", &missing_ca, Duration::from_secs(1)).unwrap_err();
        assert_eq!(e.label(), "credentials");
    }
}
