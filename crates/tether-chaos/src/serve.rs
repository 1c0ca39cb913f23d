//! `__serve <db-url> <port> [ip]`: one `tether serve` replica (exactly the
//! code of the `tether` binary, through `tether_server::start`) on a fixed
//! port of loopback (or of `ip`: `0.0.0.0` in a `--partitions` run, where
//! it has a network namespace of its own), so that a restarted replica
//! comes back at the same address. Runs until SIGTERM (graceful stop) or
//! until the parent goes away.

use std::io::BufRead;
use std::process::ExitCode;
use std::time::Duration;

use tether_server::{start, Secrets, ServeConfig};

/// The line a replica prints once it accepts connections.
pub const LISTENING: &str = "LISTENING";

/// Waits for SIGTERM or SIGINT. If the parent goes away instead (our stdin,
/// which it holds, closes), exits the process at once: a chaos run never
/// leaves processes behind.
pub async fn until_stopped() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut line = String::new();
        while stdin
            .lock()
            .read_line(&mut line)
            .map(|n| n > 0)
            .unwrap_or(false)
        {
            line.clear();
        }
        let _ = tx.send(());
    });
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("chaos child: cannot install a SIGTERM handler: {e}");
            std::process::exit(2);
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = rx => std::process::exit(3),
    }
}

/// The replica process, listening on `ip:port`.
pub fn run(database_url: &str, port: u16, ip: std::net::IpAddr) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("chaos serve: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let args = ServeConfig {
            listen: std::net::SocketAddr::new(ip, port),
            database_url: Some(database_url.to_owned()),
            data_dir: std::env::temp_dir()
                .join(format!("tether-chaos-serve-{}", std::process::id())),
            maintenance_tick: Duration::from_millis(250),
            ..ServeConfig::default()
        };
        let secrets = Secrets::from_env();
        let running = match start(&args, &secrets, tether_server::Metrics::gauges_only()).await {
            Ok(r) => r,
            Err(e) => {
                // Expected while PostgreSQL restarts: the parent tries again.
                eprintln!("chaos serve on port {port}: {e}");
                return ExitCode::FAILURE;
            }
        };
        println!("{LISTENING} {}", running.local_addr());
        until_stopped().await;
        let ok = running.stop().await.is_ok();
        let _ = std::fs::remove_dir_all(&args.data_dir);
        if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    })
}
