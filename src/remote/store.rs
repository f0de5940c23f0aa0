//! From a URL and `storage_options` to an object store client, the way each cloud's own tools
//! take credentials: the environment first (`AWS_*`, including `AWS_ENDPOINT_URL`;
//! `GOOGLE_*`; `AZURE_*`), then the options, which win. Keys are object_store's
//! (`aws_access_key_id`, `endpoint`, `region`, `google_service_account`,
//! `azure_storage_account_name`, `timeout`, `connect_timeout`, ...) plus a few that users of
//! s3fs and fsspec know: `anon`, `key`, `secret`, `token`, `endpoint_url`, and packread's
//! retry settings `max_retries` and `retry_timeout` (seconds). An unknown key is an error,
//! never silently ignored.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::http::HttpBuilder;
use object_store::path::Path;
use object_store::{ClientConfigKey, ClientOptions, ObjectStore, ObjectStoreScheme, RetryConfig};
use url::Url;

use super::errors::classify;
use crate::error::{Error, ErrorKind, Result};

/// `storage_options`, as strings, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct StoreOptions(pub Vec<(String, String)>);

/// Whether `s` names an object by URL (a scheme packread reads), not a local path.
pub fn is_url(s: &str) -> bool {
    scheme_of(s).is_some()
}

fn scheme_of(s: &str) -> Option<&'static str> {
    let (scheme, rest) = s.split_once("://")?;
    if rest.is_empty() {
        return None;
    }
    Some(match scheme.to_ascii_lowercase().as_str() {
        "s3" | "s3a" => "s3",
        "gs" | "gcs" => "gs",
        "az" | "abfs" | "abfss" | "adl" | "azure" => "az",
        "http" => "http",
        "https" => "https",
        _ => return None,
    })
}

/// A URL parsed into its store and the object's path in it.
pub(crate) struct Located {
    pub store: Arc<dyn ObjectStore>,
    pub path: Path,
}

fn bad_option(url: &str, msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidArgument, url, msg)
}

fn truthy(v: &str) -> bool {
    matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
}

fn seconds(url: &str, key: &str, v: &str) -> Result<Duration> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| {
            bad_option(
                url,
                format!("storage option {key:?} must be seconds, not {v:?}"),
            )
        })
}

/// Retry settings: object_store's backoff, with the count and total time the options set.
fn retry(url: &str, opts: &StoreOptions) -> Result<RetryConfig> {
    let mut retry = RetryConfig::default();
    for (k, v) in &opts.0 {
        match k.as_str() {
            "max_retries" => {
                retry.max_retries = v.trim().parse().map_err(|_| {
                    bad_option(
                        url,
                        format!("storage option \"max_retries\" must be a count, not {v:?}"),
                    )
                })?
            }
            "retry_timeout" => retry.retry_timeout = seconds(url, k, v)?,
            _ => {}
        }
    }
    Ok(retry)
}

/// Options that are durations: object_store takes them as text (`"2s"`, `"500ms"`); a plain
/// number is taken as seconds, as s3fs and fsspec users write them.
fn duration_text(key: &str, value: &str) -> String {
    let duration_key = [
        "timeout",
        "connect_timeout",
        "pool_idle_timeout",
        "http2_keep_alive_interval",
        "http2_keep_alive_timeout",
    ]
    .iter()
    .any(|k| key == *k || key.ends_with(&format!("_{k}")));
    match value.trim().parse::<f64>() {
        Ok(secs) if duration_key && secs.is_finite() && secs >= 0.0 => {
            format!("{}ms", (secs * 1000.0).round() as u64)
        }
        _ => value.to_string(),
    }
}

/// s3fs's names for object_store's keys.
fn alias(key: &str) -> &str {
    match key {
        "key" => "aws_access_key_id",
        "secret" => "aws_secret_access_key",
        "token" => "aws_session_token",
        "endpoint_url" => "aws_endpoint",
        "region_name" => "aws_region",
        other => other,
    }
}

/// This process's clients, one per store root (`s3://bucket/`, `https://host/`) and options:
/// the objects of one bucket share connections. Keyed by process id as well: a forked child
/// makes its own (the parent's connections are not its to use).
type Clients = HashMap<(u32, String, StoreOptions), Arc<dyn ObjectStore>>;
static CLIENTS: Mutex<Option<Clients>> = Mutex::new(None);

/// Drops this process's clients (the runtime their connections belong to is stopping).
pub(crate) fn forget_clients() {
    let pid = std::process::id();
    let mut clients = CLIENTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(clients) = clients.as_mut() {
        clients.retain(|(owner, _, _), _| *owner != pid);
    }
}

/// The client for `url`'s store and the object's path in it (see the module's comment for
/// where settings come from).
pub(crate) fn locate(url: &str, opts: &StoreOptions) -> Result<Located> {
    let parsed = Url::parse(url).map_err(|e| bad_option(url, format!("not a valid URL: {e}")))?;
    let (_, path) = ObjectStoreScheme::parse(&parsed)
        .map_err(|e| bad_option(url, format!("not a URL packread can read: {e}")))?;
    if parsed.query().is_some() || parsed.fragment().is_some() {
        // object_store addresses objects by path: a query (a presigned URL's signature)
        // would be dropped, and the request sent unsigned.
        return Err(Error::new(
            ErrorKind::Unsupported,
            url,
            "URLs with a query string (presigned URLs) are not read; give the object's URL and \
             credentials in the environment or storage_options",
        ));
    }
    let root = split_root(url)?.0.to_string();
    let key = (std::process::id(), root, opts.clone());
    let mut clients = CLIENTS.lock().unwrap_or_else(|e| e.into_inner());
    let clients = clients.get_or_insert_with(HashMap::new);
    if let Some(store) = clients.get(&key) {
        return Ok(Located {
            store: store.clone(),
            path,
        });
    }
    let located = build(url, opts)?;
    clients.insert(key, located.store.clone());
    Ok(located)
}

fn build(url: &str, opts: &StoreOptions) -> Result<Located> {
    let parsed = Url::parse(url).map_err(|e| bad_option(url, format!("not a valid URL: {e}")))?;
    let (scheme, path) = ObjectStoreScheme::parse(&parsed)
        .map_err(|e| bad_option(url, format!("not a URL packread can read: {e}")))?;
    let retry = retry(url, opts)?;
    let ours = |k: &str| {
        matches!(
            k,
            "max_retries" | "retry_timeout" | "anon" | "skip_signature"
        )
    };
    let anon = opts
        .0
        .iter()
        .any(|(k, v)| matches!(k.as_str(), "anon" | "skip_signature") && truthy(v));
    let unknown = |k: &str| bad_option(url, format!("unknown storage option {k:?} for {url}"));
    macro_rules! cloud {
        ($builder:ty) => {{
            let mut b = <$builder>::from_env().with_url(url);
            for (k, v) in opts.0.iter().filter(|(k, _)| !ours(k)) {
                b = b.with_config(k.parse().map_err(|_| unknown(k))?, duration_text(k, v));
            }
            b.with_skip_signature(anon)
                .with_retry(retry)
                .build()
                .map(|s| Arc::new(s) as _)
        }};
    }
    let store: Arc<dyn ObjectStore> = match scheme {
        ObjectStoreScheme::AmazonS3 => {
            let mut b = AmazonS3Builder::from_env().with_url(url);
            for (k, v) in opts.0.iter().filter(|(k, _)| !ours(k)) {
                let key = alias(k).parse().map_err(|_| unknown(k))?;
                b = b.with_config(key, duration_text(k, v));
            }
            // An S3-compatible server on plain HTTP (AWS_ENDPOINT_URL=http://...) is what
            // the user asked for: boto3 talks to it as given.
            let endpoint = b.get_config_value(&object_store::aws::AmazonS3ConfigKey::Endpoint);
            if endpoint.is_some_and(|e| e.starts_with("http://")) {
                b = b.with_allow_http(true);
            }
            b.with_skip_signature(anon)
                .with_retry(retry)
                .build()
                .map(|s| Arc::new(s) as _)
        }
        // The same recipe for both clouds: the environment, the options (object_store's
        // keys), anonymous access, packread's retries.
        ObjectStoreScheme::GoogleCloudStorage => cloud!(GoogleCloudStorageBuilder),
        ObjectStoreScheme::MicrosoftAzure => cloud!(MicrosoftAzureBuilder),
        ObjectStoreScheme::Http => {
            let mut client = ClientOptions::new();
            for (k, v) in opts.0.iter().filter(|(k, _)| !ours(k)) {
                let key: ClientConfigKey = k.parse().map_err(|_| unknown(k))?;
                client = client.with_config(key, duration_text(k, v));
            }
            let base = &parsed[..url::Position::BeforePath];
            HttpBuilder::new()
                .with_url(base)
                .with_client_options(client.with_allow_http(true))
                .with_retry(retry)
                .build()
                .map(|s| Arc::new(s) as _)
        }
        other => {
            return Err(bad_option(
                url,
                format!("not a URL packread can read ({other:?})"),
            ))
        }
    }
    .map_err(|e| classify(url, e))?;
    Ok(Located { store, path })
}

/// Whether a URL's path has glob characters (`*`, `?`, `[`).
pub fn has_glob(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    // An HTTP URL's query (`?sig=...`) is not part of its path.
    let path = match scheme_of(url) {
        Some(s) if s.starts_with("http") => rest.split(['?', '#']).next().unwrap_or(rest),
        _ => rest,
    };
    path.contains(['*', '?', '['])
}

/// The objects a glob URL matches, sorted, as URLs: the listing under the pattern's longest
/// literal prefix (one request per 1,000 objects), filtered by the pattern (`*` and `?` stay
/// within one `/`-separated part; `**` crosses parts).
pub fn glob(pattern: &str, opts: &StoreOptions) -> Result<Vec<String>> {
    let (scheme_host, _) = split_root(pattern)?;
    let cut = pattern.find(['*', '?', '[']).unwrap_or(pattern.len());
    let dir_end = pattern[..cut].rfind('/').unwrap_or(0);
    // Up to and with the last `/` before the first glob character (at least the root).
    let prefix_url = &pattern[..(dir_end + 1).max(scheme_host.len())];
    let located = locate(prefix_url.trim_end_matches('/'), opts)?;
    if scheme_of(pattern).is_some_and(|s| s.starts_with("http")) {
        return Err(Error::new(
            ErrorKind::Unsupported,
            pattern,
            "an HTTP server has no listing to match a glob against; list the URLs",
        ));
    }
    let store = located.store.clone();
    let prefix = located.path.clone();
    let listed = prefix_url.to_string();
    let metas = super::runtime::block_on(async move {
        use futures::TryStreamExt;
        let p = (!prefix.as_ref().is_empty()).then_some(&prefix);
        store
            .list(p)
            .try_collect::<Vec<_>>()
            .await
            .map_err(|e| classify(&listed, e))
    })?;
    let rel = &pattern[scheme_host.len()..];
    let mut urls: Vec<String> = metas
        .into_iter()
        .filter(|m| glob_match(rel.as_bytes(), m.location.as_ref().as_bytes()))
        .map(|m| format!("{scheme_host}{}", m.location))
        .collect();
    urls.sort();
    Ok(urls)
}

/// `s3://bucket/a/b` -> (`s3://bucket/`, `a/b`).
fn split_root(url: &str) -> Result<(&str, &str)> {
    let (_, rest) = url
        .split_once("://")
        .ok_or_else(|| bad_option(url, "not a URL"))?;
    let root_len = url.len() - rest.len() + rest.find('/').map_or(rest.len(), |i| i + 1);
    Ok(url.split_at(root_len))
}

/// Shell-style matching of a path against a pattern, as `glob.glob` does for one file
/// system: `*` any run of characters but `/`, `**` any run including `/`, `?` one character
/// but `/`, `[...]` one of a set (`[!...]` none of it).
pub(crate) fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    match pat.first() {
        None => s.is_empty(),
        Some(b'*') if pat.get(1) == Some(&b'*') => {
            let rest = &pat[2..];
            (0..=s.len()).any(|i| glob_match(rest, &s[i..]))
        }
        Some(b'*') => {
            let rest = &pat[1..];
            let limit = s.iter().position(|&c| c == b'/').unwrap_or(s.len());
            (0..=limit).any(|i| glob_match(rest, &s[i..]))
        }
        Some(b'?') => s.first().is_some_and(|&c| c != b'/') && glob_match(&pat[1..], &s[1..]),
        Some(b'[') => {
            let Some(close) = pat.iter().skip(2).position(|&c| c == b']').map(|i| i + 2) else {
                return s.first() == Some(&b'[') && glob_match(&pat[1..], &s[1..]);
            };
            let Some(&c) = s.first() else { return false };
            let (negate, set) = match pat[1] {
                b'!' => (true, &pat[2..close]),
                _ => (false, &pat[1..close]),
            };
            let mut hit = false;
            let mut i = 0;
            while i < set.len() {
                if i + 2 < set.len() && set[i + 1] == b'-' {
                    hit |= set[i] <= c && c <= set[i + 2];
                    i += 3;
                } else {
                    hit |= set[i] == c;
                    i += 1;
                }
            }
            hit != negate && c != b'/' && glob_match(&pat[close + 1..], &s[1..])
        }
        Some(&p) => s.first() == Some(&p) && glob_match(&pat[1..], &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_as_the_shell_does() {
        let m = |p: &str, s: &str| glob_match(p.as_bytes(), s.as_bytes());
        assert!(m("train_*.h5", "train_001.h5"));
        assert!(!m("train_*.h5", "train_001.h5x"));
        assert!(!m("*.h5", "a/b.h5"));
        assert!(m("**/*.h5", "a/b/c.h5"));
        assert!(m("part-?.zip", "part-1.zip"));
        assert!(!m("part-?.zip", "part-10.zip"));
        assert!(m("p[0-2].npy", "p1.npy"));
        assert!(!m("p[!0-2].npy", "p1.npy"));
        assert!(m("p[!0-2].npy", "p7.npy"));
    }

    #[test]
    fn urls_are_told_from_paths() {
        assert!(is_url("s3://bucket/key.h5"));
        assert!(is_url("HTTPS://host/x"));
        assert!(is_url("az://container/x"));
        assert!(!is_url("/data/train.h5"));
        assert!(!is_url("file://x"));
        assert!(!is_url("s3://"));
        assert!(has_glob("s3://b/train_*.h5"));
        assert!(!has_glob("s3://b/train.h5"));
        assert!(!has_glob("https://h/f.h5?sig=abc"));
        assert_eq!(duration_text("timeout", "2"), "2000ms");
        assert_eq!(duration_text("aws_timeout", "0.5"), "500ms");
        assert_eq!(duration_text("timeout", "3s"), "3s");
        assert_eq!(duration_text("region", "2"), "2");
        assert_eq!(split_root("s3://b/a/c").unwrap(), ("s3://b/", "a/c"));
    }
}
