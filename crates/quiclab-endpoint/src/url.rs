//! The request URL every client takes, parsed once: scheme (TLS or not), host without IPv6
//! brackets (as name resolution and TLS server names want it), port, authority and path.

use std::net::{SocketAddr, ToSocketAddrs};

use http::Uri;

/// What is wrong with a URL.
#[derive(Debug, thiserror::Error)]
pub enum UrlError {
    #[error("URL {url:?}: {reason}")]
    Bad { url: String, reason: String },
    #[error("URL {url:?}: {what} needs https:// (TLS 1.3)")]
    NeedsTls { url: String, what: &'static str },
    #[error("resolving {host}")]
    Resolve {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{host} has no address")]
    NoAddress { host: String },
}

/// A parsed `https://` or `http://` URL.
#[derive(Debug, Clone)]
pub struct Url {
    pub uri: Uri,
    /// `https://` (TLS) rather than `http://`.
    pub tls: bool,
    /// The host, IPv6 literals without their brackets.
    pub host: String,
    /// The port, 443 or 80 when the URL names none.
    pub port: u16,
    /// `host:port`, IPv6 literals in brackets: what tells connections apart.
    pub authority: String,
    /// Path and query, `/` when empty.
    pub path: String,
}

impl Url {
    /// Parses `url`: `https://` or `http://`, with a host.
    pub fn parse(url: &str) -> Result<Url, UrlError> {
        let bad = |reason: &str| UrlError::Bad {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(bad(
                    "allowed: https:// URLs, or http:// for HTTP/1.1 without TLS",
                ));
            }
        };
        let host = uri
            .host()
            .ok_or_else(|| bad("no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let path = uri
            .path_and_query()
            .map_or_else(|| "/".to_string(), |p| p.as_str().to_string());
        Ok(Url {
            uri,
            tls,
            host,
            port,
            authority,
            path,
        })
    }

    /// As [`Url::parse`], refusing `http://`: `what` (e.g. "HTTP/3") always runs over TLS.
    pub fn parse_tls(url: &str, what: &'static str) -> Result<Url, UrlError> {
        let u = Url::parse(url)?;
        if !u.tls {
            return Err(UrlError::NeedsTls {
                url: url.to_string(),
                what,
            });
        }
        Ok(u)
    }

    /// The first address of the host (a blocking lookup: the lab's URLs name addresses).
    pub fn resolve(&self) -> Result<SocketAddr, UrlError> {
        (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|source| UrlError::Resolve {
                host: self.host.clone(),
                source,
            })?
            .next()
            .ok_or_else(|| UrlError::NoAddress {
                host: self.host.clone(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_scheme_host_port_and_path() {
        let u = Url::parse("https://198.18.0.2/bytes/10").unwrap();
        assert_eq!((u.tls, u.host.as_str(), u.port), (true, "198.18.0.2", 443));
        assert_eq!(
            (u.authority.as_str(), u.path.as_str()),
            ("198.18.0.2:443", "/bytes/10")
        );
        let u = Url::parse("http://[fd51:c1ab::2]").unwrap();
        assert_eq!(
            (u.tls, u.host.as_str(), u.port),
            (false, "fd51:c1ab::2", 80)
        );
        assert_eq!(
            (u.authority.as_str(), u.path.as_str()),
            ("[fd51:c1ab::2]:80", "/")
        );
        assert_eq!(
            Url::parse("https://127.0.0.1:4433/x?y=1")
                .unwrap()
                .resolve()
                .unwrap(),
            "127.0.0.1:4433".parse().unwrap()
        );
        let e = Url::parse("ftp://host/").unwrap_err().to_string();
        assert!(e.contains("allowed: https://"), "{e}");
        let e = Url::parse_tls("http://host/", "HTTP/3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("HTTP/3 needs https://"), "{e}");
        assert!(Url::parse("https:///nohost").is_err());
    }
}
