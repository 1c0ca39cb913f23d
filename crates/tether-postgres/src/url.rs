//! PostgreSQL connection URLs, including libpq's multi-host form.

use sqlx::postgres::PgConnectOptions;
use tether_core::{Error, Result};

/// `url` with its database (path) replaced by `database`, keeping any query;
/// a URL without a database gets one. For tools and tests that create a
/// database through an admin URL and then connect to it.
pub fn url_with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.find('?') {
        Some(i) => (&url[..i], &url[i..]),
        None => (url, ""),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(i) => &base[..authority_start + i],
        None => base,
    };
    format!("{base}/{database}{query}")
}

/// The servers a URL names, in the order to try them, and whether tether
/// must find the writable one among them.
#[derive(Debug, Clone)]
pub(crate) struct Hosts {
    pub(crate) candidates: Vec<PgConnectOptions>,
    /// `target_session_attrs=read-write` (or `primary`): skip servers that
    /// are read-only (a standby). The default when several hosts are named.
    pub(crate) writable_only: bool,
}

/// Reads a `postgres://` URL naming one server or several, libpq style:
/// `postgres://user@a:5432,b:5433/db?target_session_attrs=read-write`, or
/// `?host=a,b&port=5432,5433`. One port for several hosts applies to all.
/// tether writes, so of libpq's `target_session_attrs` only `read-write`,
/// `primary` (the same to tether) and `any` (take the first that answers)
/// make sense; with several hosts the default is `read-write`.
pub(crate) fn parse_hosts(url: &str) -> Result<Hosts> {
    let invalid = |why: String| Error::invalid("database_url", why);
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| invalid("expected postgres://…".into()))?;
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, host_list) = match authority.rfind('@') {
        Some(i) => authority.split_at(i + 1),
        None => ("", authority),
    };
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));

    let mut attrs = None;
    let mut query_hosts = None;
    let mut query_ports = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "target_session_attrs" => attrs = Some(value.to_owned()),
            "host" if value.contains(',') || value.contains("%2C") => {
                query_hosts = Some(value.replace("%2C", ","))
            }
            "port" if value.contains(',') || value.contains("%2C") => {
                query_ports = Some(value.replace("%2C", ","))
            }
            _ => kept.push(pair),
        }
    }
    let rebuilt = |host: &str, port: Option<&str>| {
        let mut query = kept.join("&");
        if let Some(port) = port {
            if !query.is_empty() {
                query.push('&');
            }
            query.push_str("port=");
            query.push_str(port);
        }
        let query = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        format!("{scheme}://{userinfo}{host}{path}{query}")
    };

    let mut urls = Vec::new();
    if let Some(hosts) = &query_hosts {
        // `?host=a,b&port=1,2`: the hosts go into the authority, one URL each.
        let hosts: Vec<&str> = hosts.split(',').collect();
        let ports: Vec<&str> = query_ports
            .as_deref()
            .map_or(vec![], |p| p.split(',').collect());
        if ports.len() > 1 && ports.len() != hosts.len() {
            return Err(invalid(format!(
                "{} hosts but {} ports: give one port, or one per host",
                hosts.len(),
                ports.len()
            )));
        }
        for (i, host) in hosts.iter().enumerate() {
            let port = ports.get(i).or(ports.first()).copied();
            urls.push(rebuilt(host, port));
        }
    } else {
        if query_ports.is_some() {
            return Err(invalid(
                "a port list in the query needs the host list there too (?host=a,b&port=1,2)"
                    .into(),
            ));
        }
        let entries: Vec<&str> = host_list.split(',').collect();
        // A port on the last entry only applies to every host without one.
        let last_port = entries.last().and_then(|e| port_of(e)).filter(|_| {
            entries.len() > 1
                && entries[..entries.len() - 1]
                    .iter()
                    .all(|e| port_of(e).is_none())
        });
        for entry in &entries {
            if entry.is_empty() && entries.len() > 1 {
                return Err(invalid("an empty host in the host list".into()));
            }
            let entry = match (port_of(entry), last_port) {
                (None, Some(port)) => format!("{entry}:{port}"),
                _ => (*entry).to_owned(),
            };
            urls.push(rebuilt(&entry, None));
        }
    }

    let writable_only = match attrs.as_deref() {
        None => urls.len() > 1,
        Some("read-write" | "primary") => true,
        Some("any") => false,
        Some(other) => {
            return Err(invalid(format!(
            "target_session_attrs={other}: tether writes, so it needs read-write, primary or any"
        )))
        }
    };
    let candidates = urls
        .iter()
        .map(|u| {
            u.parse::<PgConnectOptions>()
                .map_err(|e| invalid(e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Hosts {
        candidates,
        writable_only,
    })
}

/// The port of `host:port` (an IPv6 address in brackets keeps its colons).
fn port_of(entry: &str) -> Option<&str> {
    let after_bracket = entry.rfind(']').map_or(0, |i| i + 1);
    entry[after_bracket..]
        .rfind(':')
        .map(|i| &entry[after_bracket + i + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_is_replaced_in_urls() {
        assert_eq!(
            url_with_database("postgres://postgres@127.0.0.1:5432/postgres", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            url_with_database("postgres://u:p@h/db?sslmode=disable", "x"),
            "postgres://u:p@h/x?sslmode=disable"
        );
        assert_eq!(url_with_database("postgres://h:1", "x"), "postgres://h:1/x");
        assert_eq!(
            url_with_database("postgres://h?application_name=a", "x"),
            "postgres://h/x?application_name=a"
        );
    }

    fn hosts_of(url: &str) -> (Vec<(String, u16, String)>, bool) {
        let hosts = parse_hosts(url).unwrap();
        (
            hosts
                .candidates
                .iter()
                .map(|o| {
                    (
                        o.get_host().to_owned(),
                        o.get_port(),
                        o.get_database().unwrap_or("").to_owned(),
                    )
                })
                .collect(),
            hosts.writable_only,
        )
    }

    #[test]
    fn one_host_is_one_candidate_with_no_check() {
        let (hosts, writable) = hosts_of("postgres://u@db.internal:6432/app?sslmode=disable");
        assert_eq!(hosts, vec![("db.internal".into(), 6432, "app".into())]);
        assert!(!writable);
        let (_, writable) = hosts_of("postgres://u@h/app?target_session_attrs=read-write");
        assert!(writable);
    }

    #[test]
    fn several_hosts_in_the_authority_look_for_the_writable_one() {
        let (hosts, writable) =
            hosts_of("postgres://u:p@a:5433,b:5434/app?target_session_attrs=read-write");
        assert_eq!(
            hosts,
            vec![
                ("a".into(), 5433, "app".into()),
                ("b".into(), 5434, "app".into())
            ]
        );
        assert!(writable);
        // Several hosts default to read-write; a port on the last entry
        // alone applies to all.
        let (hosts, writable) = hosts_of("postgres://a,b:6000/app");
        assert_eq!(
            hosts,
            vec![
                ("a".into(), 6000, "app".into()),
                ("b".into(), 6000, "app".into())
            ]
        );
        assert!(writable);
        let (hosts, _) = hosts_of("postgres://[::1]:5433,[::1]:5434/app");
        assert_eq!(hosts[1].1, 5434);
    }

    #[test]
    fn several_hosts_in_the_query_like_libpq() {
        let (hosts, writable) = hosts_of("postgres://u@/app?host=a,b&port=1,2&sslmode=disable");
        assert_eq!(
            hosts,
            vec![("a".into(), 1, "app".into()), ("b".into(), 2, "app".into())]
        );
        assert!(writable);
        let (hosts, _) = hosts_of("postgres://u@/app?host=a%2Cb&port=7");
        assert_eq!(hosts[1], ("b".into(), 7, "app".into()));
    }

    #[test]
    fn session_attrs_tether_cannot_use_are_refused() {
        for url in [
            "postgres://a,b/app?target_session_attrs=read-only",
            "postgres://a,b/app?target_session_attrs=standby",
            "postgres://a,,b/app",
            "postgres://u@/app?host=a,b,c&port=1,2",
        ] {
            assert!(parse_hosts(url).is_err(), "{url}");
        }
        let (_, writable) = hosts_of("postgres://a,b/app?target_session_attrs=any");
        assert!(!writable);
    }
}
