//! object_store's errors as packread's, naming the URL: not found and access denied as the
//! OS errors a local read would give (`FileNotFoundError`, `PermissionError`, with the HTTP
//! status), a request that still failed when the retries ran out as a `TimeoutError` when
//! time ran out and an `OSError` otherwise, a changed object as `Changed`.

use std::io;

use crate::error::{Error, ErrorKind};

/// The HTTP status a message from object_store names (`... status 403 Forbidden ...`).
fn status_in(msg: &str) -> Option<u16> {
    ["status code: ", "status "].iter().find_map(|p| {
        let at = msg.find(p)? + p.len();
        msg[at..].get(..3)?.parse().ok()
    })
}

/// The first line of `text`, at most 300 characters (a server's HTML or XML error body
/// follows the status line).
fn first_line(text: &str) -> String {
    let line = text
        .lines()
        .next()
        .unwrap_or_default()
        .trim_end_matches([':', ' ']);
    match line.char_indices().nth(300) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line.to_string(),
    }
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![first_line(&e.to_string())];
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = first_line(&s.to_string());
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = s.source();
    }
    parts.join(": ")
}

/// Whether anything in `e`'s chain is a timeout (a request or connect timeout of the HTTP
/// client, or the retry budget spent).
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(s) = cur {
        if let Some(io) = s.downcast_ref::<io::Error>() {
            if io.kind() == io::ErrorKind::TimedOut {
                return true;
            }
        }
        let text = s.to_string().to_ascii_lowercase();
        if text.contains("timed out") || text.contains("timeout") {
            return true;
        }
        cur = s.source();
    }
    false
}

/// `e`, from a request about `url`, as a packread error.
pub(crate) fn classify(url: &str, e: object_store::Error) -> Error {
    use object_store::Error as E;
    let detail = chain(&e);
    let status = status_in(&detail);
    let with_status = |what: &str| match status {
        Some(s) => format!("{what} (HTTP {s}): {detail}"),
        None => format!("{what}: {detail}"),
    };
    match e {
        E::NotFound { .. } => Error::io(
            url,
            io::Error::new(io::ErrorKind::NotFound, with_status("no such object")),
        ),
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => Error::io(
            url,
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                with_status("access denied"),
            ),
        ),
        E::Precondition { .. } => changed(url, "its ETag no longer matches"),
        E::Generic {
            store: "Config", ..
        } => Error::new(
            ErrorKind::InvalidArgument,
            url,
            format!("a storage option has a value that does not parse: {detail}"),
        ),
        E::UnknownConfigurationKey { key, .. } => Error::new(
            ErrorKind::InvalidArgument,
            url,
            format!("unknown storage option {key:?}"),
        ),
        _ if matches!(status, Some(401 | 403)) => Error::io(
            url,
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                with_status("access denied"),
            ),
        ),
        _ if status == Some(404) => Error::io(
            url,
            io::Error::new(io::ErrorKind::NotFound, with_status("no such object")),
        ),
        _ if status == Some(412) => changed(url, "its ETag no longer matches"),
        _ if timed_out(&e) => Error::io(
            url,
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("request timed out after its retries: {detail}"),
            ),
        ),
        _ => Error::io(
            url,
            io::Error::other(with_status("request failed after its retries")),
        ),
    }
}

/// The object at `url` is no longer what the reader opened.
pub(crate) fn changed(url: &str, how: &str) -> Error {
    Error::new(
        ErrorKind::Changed,
        url,
        format!("object changed since the reader opened it ({how}); open a new reader"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_are_found_in_messages() {
        assert_eq!(
            status_in("Client error with status 403 Forbidden: <xml>"),
            Some(403)
        );
        assert_eq!(status_in("no status here"), None);
    }

    #[test]
    fn kinds_follow_the_error() {
        let e = classify(
            "s3://b/k",
            object_store::Error::NotFound {
                path: "k".into(),
                source: "Client error with status 404 Not Found".into(),
            },
        );
        assert_eq!(e.io_kind(), Some(io::ErrorKind::NotFound));
        assert!(e.to_string().contains("s3://b/k"), "{e}");
        assert!(e.to_string().contains("HTTP 404"), "{e}");
        let e = classify(
            "s3://b/k",
            object_store::Error::Generic {
                store: "S3",
                source: "Client error with status 403 Forbidden: InvalidAccessKeyId".into(),
            },
        );
        assert_eq!(e.io_kind(), Some(io::ErrorKind::PermissionDenied));
        let e = classify(
            "s3://b/k",
            object_store::Error::Generic {
                store: "S3",
                source: "error sending request: operation timed out".into(),
            },
        );
        assert_eq!(e.io_kind(), Some(io::ErrorKind::TimedOut));
    }
}
