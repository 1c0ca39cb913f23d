//! `tether tenants` and `tether keys`, and where the CLI's key comes from.

use super::*;

#[tokio::test]
async fn tenants_and_keys_need_an_admin_key() {
    let s = Setup::sqlite("cli-admin");
    let created = s.cli(&["tenants", "create", "acme", "--json"]).ok().json();
    let tenant_id = created["tenant"]["id"].as_str().unwrap().to_owned();
    let acme_key = created["api_key"].as_str().unwrap().to_owned();
    let (status, _) = call(Method::GET, &s.server().url("/v1/queues"), &acme_key, None).await;
    assert_eq!(status, 200, "the new tenant's key works");

    let list = s.cli(&["tenants", "ls", "--json"]).ok().json();
    let names: Vec<&str> = list["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"acme") && names.contains(&"default"),
        "{list}"
    );
    let table = s.cli(&["tenants", "ls"]).ok().stdout;
    assert!(table.contains(&tenant_id), "{table}");
    let dup = s.cli(&["tenants", "create", "acme"]).expect(1);
    assert!(
        dup.stderr.starts_with("error: already_exists: "),
        "{}",
        dup.stderr
    );

    // keys create (by tenant name and by id), then revoke.
    let key = s
        .cli(&["keys", "create", "acme", "--name", "ci", "--json"])
        .ok()
        .json();
    let key_id = key["key_id"].as_str().unwrap().to_owned();
    let ci_key = key["api_key"].as_str().unwrap().to_owned();
    let (status, _) = call(Method::GET, &s.server().url("/v1/queues"), &ci_key, None).await;
    assert_eq!(status, 200);
    let human = s.cli(&["keys", "create", &tenant_id]).ok().stdout;
    assert!(human.contains("api key (shown once): tth_"), "{human}");
    let refused = s.cli(&["keys", "create", "acme", "--admin"]).expect(1);
    assert!(
        refused.stderr.starts_with("error: invalid_argument: "),
        "{}",
        refused.stderr
    );
    s.cli(&["keys", "revoke", &key_id]).ok();
    let (status, _) = call(Method::GET, &s.server().url("/v1/queues"), &ci_key, None).await;
    assert_eq!(status, 401, "a revoked key authenticates nothing");

    // keys ls: one tenant (by name or id), or every tenant; never a secret.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let listed = loop {
        let listed = s
            .cli(&["keys", "ls", "--tenant", "acme", "--json"])
            .ok()
            .json();
        // The first key's use is recorded in the background.
        if !listed["keys"][0]["last_used_at"].is_null() {
            break listed;
        }
        assert!(std::time::Instant::now() < deadline, "{listed}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let keys = listed["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 3, "{listed}");
    assert!(keys.iter().all(|k| k["tenant"] == "acme"), "{listed}");
    assert_eq!(
        (&keys[1]["id"], &keys[1]["name"]),
        (&json!(key_id), &json!("ci"))
    );
    assert!(keys[1]["revoked_at"].is_string(), "{listed}");
    assert!(keys[2]["last_used_at"].is_null(), "{listed}");
    for args in [
        ["keys", "ls", "--tenant", &tenant_id, "--json"].as_slice(),
        &["keys", "ls", "acme", "--json"],
        &["keys", "ls", &tenant_id, "--json"],
    ] {
        assert_eq!(s.cli(args).ok().json(), listed, "{args:?}");
    }
    let table = s.cli(&["keys", "ls"]).ok().stdout;
    for text in [
        "TENANT",
        "LAST USED",
        "default",
        "acme",
        &key_id,
        "ci",
        "never",
        "yes",
    ] {
        assert!(table.contains(text), "{text:?} missing:\n{table}");
    }
    for secret in [&acme_key, &ci_key] {
        let tail = secret.rsplit('_').next().unwrap();
        assert!(!table.contains(tail) && !listed.to_string().contains(tail));
    }
    for args in [
        ["keys", "ls", "--tenant", "nope"],
        ["keys", "ls", "nope", "--json"],
    ] {
        let unknown = s.cli(&args).expect(1);
        assert!(
            unknown.stderr.starts_with("error: not_found: "),
            "{args:?}: {}",
            unknown.stderr
        );
    }

    // A tenant's own key has no admin scope.
    let denied = tether(
        &["tenants", "ls", "--url", &s.url, "--key", &acme_key],
        &[],
        None,
    )
    .expect(1);
    assert!(
        denied.stderr.starts_with("error: permission_denied: "),
        "{}",
        denied.stderr
    );
    // And it sees only its own tenant's jobs.
    tether(
        &[
            "enqueue", "private", "k", "--url", &s.url, "--key", &acme_key,
        ],
        &[],
        None,
    )
    .ok();
    let mine = tether(
        &["jobs", "ls", "--json", "--url", &s.url, "--key", &acme_key],
        &[],
        None,
    )
    .ok()
    .json();
    assert_eq!(mine["jobs"].as_array().unwrap().len(), 1);
    let admins = s
        .cli(&["jobs", "ls", "--queue", "private", "--json"])
        .ok()
        .json();
    assert!(admins["jobs"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn the_key_comes_from_the_flag_the_environment_or_admin_key_under_the_data_dir() {
    let s = Setup::sqlite("cli-keys");
    // --data-dir: admin.key found there, nothing else given.
    let out = tether(
        &[
            "enqueue",
            "found",
            "k",
            "--url",
            &s.url,
            "--data-dir",
            s.dir(),
            "--json",
        ],
        &[],
        None,
    )
    .ok();
    let id = out.json()["job"]["id"].as_str().unwrap().to_owned();
    assert_eq!(s.job(&id).await["queue"], "found");
    // --data-dir given before the subcommand's own arguments works too.
    tether(
        &["jobs", "--url", &s.url, "--data-dir", s.dir(), "show", &id],
        &[],
        None,
    )
    .ok();
    // TETHER_KEY and --key win over the file.
    let out = tether(
        &["jobs", "ls", "--json"],
        &[
            ("TETHER_URL", &s.url),
            ("TETHER_KEY", &s.key),
            ("TETHER_DATA_DIR", "/nonexistent"),
        ],
        None,
    )
    .ok();
    assert_eq!(ids(&out.json(), "jobs"), vec![id.clone()]);
    let wrong = tether(
        &[
            "jobs",
            "ls",
            "--url",
            &s.url,
            "--key",
            "tth_not_a_real_key",
            "--data-dir",
            s.dir(),
        ],
        &[],
        None,
    )
    .expect(1);
    assert!(
        wrong.stderr.starts_with("error: unauthenticated: "),
        "{}",
        wrong.stderr
    );

    // No key anywhere: a usage error that says what to do.
    let empty = temp_dir("cli-nokey");
    let none = tether(
        &[
            "jobs",
            "ls",
            "--url",
            &s.url,
            "--data-dir",
            empty.to_str().unwrap(),
        ],
        &[],
        None,
    )
    .expect(2);
    assert!(
        none.stderr.starts_with("error: no API key"),
        "{}",
        none.stderr
    );
    assert!(none.stderr.contains("admin.key"), "{}", none.stderr);
    let _ = std::fs::remove_dir_all(&empty);

    // Nobody listening: exit 1, says where it tried.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{closed}");
    let out = tether(&["stats", "--url", &url, "--key", "k"], &[], None).expect(1);
    assert!(
        out.stderr.starts_with(&format!(
            "error: the server could not be reached at {url}: "
        )),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    // A URL that is no URL: usage.
    tether(&["stats", "--url", "not a url", "--key", "k"], &[], None).expect(2);
}

/// `--tenant`: the admin key acts for a tenant (by name, flags before or
/// after the subcommand) and sees only its jobs; a tenant key may not.
#[tokio::test]
async fn the_admin_acts_for_a_tenant_with_tenant() {
    let s = Setup::sqlite("cli-act-for");
    let acme_key = s.cli(&["tenants", "create", "acme", "--json"]).ok().json()["api_key"]
        .as_str()
        .unwrap()
        .to_owned();
    s.cli(&["enqueue", "own-queue", "k"]).ok();
    let made = s
        .cli(&["--tenant", "acme", "enqueue", "acme-queue", "k", "--json"])
        .ok()
        .json();
    let id = made["job"]["id"].as_str().unwrap().to_owned();
    for args in [
        vec!["--json", "--tenant", "acme", "jobs", "ls"],
        vec!["jobs", "ls", "--tenant=acme", "--json"],
        vec!["--tenant", "acme", "jobs", "ls", "--json"],
    ] {
        let listed = s.cli(&args).ok().json();
        let ids: Vec<&str> = listed["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, [id.as_str()], "{args:?}");
    }
    let own = s.cli(&["jobs", "ls", "--json"]).ok().json();
    assert_eq!(own["jobs"][0]["queue"], "own-queue");
    assert_eq!(own["jobs"].as_array().unwrap().len(), 1);
    // The tenant's own key with --tenant: the server's 403, nothing done.
    let refused = s
        .cli(&[
            "--key", &acme_key, "--tenant", "default", "enqueue", "x", "k",
        ])
        .expect(1);
    assert!(
        refused.stderr.starts_with("error: permission_denied: "),
        "{}",
        refused.stderr
    );
    let unknown = s.cli(&["--tenant", "nobody", "jobs", "ls"]).expect(1);
    assert!(
        unknown.stderr.starts_with("error: not_found: "),
        "{}",
        unknown.stderr
    );
    // serve and migrate keep their own flags: a client flag before them is
    // left for the parser, which refuses it.
    s.cli(&["--json", "migrate", "status"]).expect(2);
}
