//! `tether tenants ls | create` and `tether keys ls | create | revoke`
//! (admin key).

use chrono::Utc;
use clap::Subcommand;
use serde::Serialize;
use tether_client::{ApiKey, ErrorCode, NewKey};
use uuid::Uuid;

use super::format::{self, Table};
use super::{out, CliError, Conn, Ctx};

/// `tether tenants …`.
#[derive(Debug, clap::Args)]
pub struct TenantsArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: TenantsCommand,
}

#[derive(Debug, Subcommand)]
enum TenantsCommand {
    /// Every tenant.
    Ls,
    /// Create a tenant and its first API key (shown once).
    Create {
        /// Its unique name.
        name: String,
    },
}

/// `tether keys …`.
#[derive(Debug, clap::Args)]
pub struct KeysArgs {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    command: KeysCommand,
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// List keys: ids, names, scope, when created, last used (to within a
    /// minute) and revoked; never secrets. With --json, the API's key
    /// objects, each with its tenant's name.
    Ls {
        /// Only this tenant's keys (id or name) [default: the global
        /// --tenant's if given, else every tenant's].
        // An id of its own: `tenant` is the global --tenant's.
        #[arg(id = "only_tenant", value_name = "TENANT")]
        tenant: Option<String>,
    },
    /// Issue an API key for a tenant (shown once).
    Create {
        /// The tenant's id or name.
        #[arg(id = "for_tenant", value_name = "TENANT")]
        tenant: String,
        /// A label for humans.
        #[arg(long)]
        name: Option<String>,
        /// Admin scope (only for the `default` tenant).
        #[arg(long)]
        admin: bool,
    },
    /// Revoke a key at once.
    Revoke {
        /// The key's id.
        key_id: Uuid,
    },
}

pub(crate) async fn run_tenants(args: TenantsArgs) -> Result<(), CliError> {
    let ctx = Ctx::new(&args.conn)?;
    match args.command {
        TenantsCommand::Ls => {
            let tenants = ctx.call(ctx.client.list_tenants()).await?;
            if ctx.json {
                return ctx.print_doc("tenants", &tenants);
            }
            let now = Utc::now();
            let mut t = Table::new(&["ID", "NAME", "CREATED"]);
            for tenant in &tenants {
                t.row(vec![
                    tenant.id.to_string(),
                    tenant.name.clone(),
                    format::ago(tenant.created_at, now),
                ]);
            }
            t.print();
            Ok(())
        }
        TenantsCommand::Create { name } => {
            let created = ctx.call(ctx.client.create_tenant(&name)).await?;
            if ctx.json {
                return ctx.print_json(&created);
            }
            out(&format!(
                "created tenant {} ({})\napi key (shown once): {}\n",
                created.tenant.name, created.tenant.id, created.api_key
            ));
            Ok(())
        }
    }
}

/// A key with its tenant's name, as `tether keys ls --json` prints it.
#[derive(Serialize)]
struct TenantKey {
    tenant: String,
    #[serde(flatten)]
    key: ApiKey,
}

pub(crate) async fn run_keys(args: KeysArgs) -> Result<(), CliError> {
    let ctx = Ctx::new(&args.conn)?;
    match args.command {
        KeysCommand::Ls { tenant } => {
            let tenant = tenant.or_else(|| ctx.tenant.clone());
            let mut tenants: Vec<(Uuid, String)> = ctx
                .call(ctx.client.list_tenants())
                .await?
                .into_iter()
                .map(|t| (t.id, t.name))
                .collect();
            if let Some(tenant) = tenant {
                let id = tenant_id(&ctx, &tenant).await?;
                tenants.retain(|(t, _)| *t == id);
                if tenants.is_empty() {
                    // Not listed: the server answers not_found for it.
                    tenants.push((id, tenant));
                }
            }
            let mut keys = Vec::new();
            for (id, name) in tenants {
                for key in ctx.call(ctx.client.list_keys(id)).await? {
                    keys.push(TenantKey {
                        tenant: name.clone(),
                        key,
                    });
                }
            }
            if ctx.json {
                return ctx.print_doc("keys", &keys);
            }
            let now = Utc::now();
            let mut t = Table::new(&[
                "TENANT",
                "ID",
                "NAME",
                "ADMIN",
                "CREATED",
                "LAST USED",
                "REVOKED",
            ])
            .flex("NAME");
            for TenantKey { tenant, key } in &keys {
                t.row(vec![
                    tenant.clone(),
                    key.id.to_string(),
                    key.name.clone().unwrap_or_default(),
                    if key.admin { "yes" } else { "" }.to_owned(),
                    format::ago(key.created_at, now),
                    key.last_used_at
                        .map_or_else(|| "never".to_owned(), |t| format::ago(t, now)),
                    format::ago_opt(key.revoked_at, now),
                ]);
            }
            t.print();
            Ok(())
        }
        KeysCommand::Create {
            tenant,
            name,
            admin,
        } => {
            let tenant_id = tenant_id(&ctx, &tenant).await?;
            let created = ctx
                .call(ctx.client.create_key(tenant_id, &NewKey { name, admin }))
                .await?;
            if ctx.json {
                return ctx.print_json(&created);
            }
            out(&format!(
                "created {}key {} for tenant {tenant}\napi key (shown once): {}\n",
                if admin { "admin " } else { "" },
                created.key_id,
                created.api_key
            ));
            Ok(())
        }
        KeysCommand::Revoke { key_id } => {
            ctx.call(ctx.client.revoke_key(key_id)).await?;
            if ctx.json {
                return ctx.print_doc("revoked", &key_id);
            }
            out(&format!("revoked key {key_id}\n"));
            Ok(())
        }
    }
}

/// A tenant named by id or by name.
async fn tenant_id(ctx: &Ctx, tenant: &str) -> Result<Uuid, CliError> {
    if let Ok(id) = Uuid::try_parse(tenant) {
        return Ok(id);
    }
    ctx.call(ctx.client.list_tenants())
        .await?
        .into_iter()
        .find(|t| t.name == tenant)
        .map(|t| t.id)
        .ok_or_else(|| CliError::Api {
            url: ctx.url.clone(),
            error: tether_client::Error::Api {
                status: 404,
                code: ErrorCode::NotFound,
                message: format!("tenant {tenant:?} not found (no id or name matches)"),
            },
        })
}
