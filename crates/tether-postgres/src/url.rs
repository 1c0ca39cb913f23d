//! PostgreSQL connection URLs.

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
}
