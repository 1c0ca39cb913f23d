//! The OpenAPI document of the HTTP API, generated from the routes of
//! `routes::api` (each handler's `#[utoipa::path]`), the schemas of
//! `tether-api` and `error.rs`, and served at `GET /openapi.json`.
//!
//! `docs/openapi.json` is a committed copy; `tests/http/openapi.rs` fails when
//! it differs from what this module makes.

use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::schema::{Schema, SchemaType, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::RefOr;
use utoipa::{Modify, OpenApi};

use crate::error::{
    BadRequest, Internal, PayloadTooLarge, PermissionDenied, Unauthenticated, Unavailable,
    UnsupportedMediaType,
};

/// The name of the bearer-key security scheme.
const API_KEY: &str = "api_key";

/// What the document has besides the routes' operations: its description,
/// the shared error answers, the bearer scheme and the tags.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "tether",
        description = "The HTTP API of tether, a durable job queue (reference: `docs/API.md`).\n\n\
            JSON in, JSON out; unknown fields in a request body are rejected. Times are RFC 3339 \
            strings in UTC with milliseconds; durations are integer milliseconds named `*_ms`; ids \
            are UUIDs. Every `/v1` route needs `Authorization: Bearer <api key>`; a key sees only \
            its tenant's jobs, queues and schedules, and admin keys (of the `default` tenant only) \
            also manage tenants and keys and read `/metrics`. Errors are a status plus \
            `{\"error\": {\"code\", \"message\"}}`.",
        license(name = "MIT OR Apache-2.0", identifier = "MIT OR Apache-2.0"),
    ),
    components(schemas(tether_api::ErrorBody), responses(
        BadRequest,
        Unauthenticated,
        PermissionDenied,
        PayloadTooLarge,
        UnsupportedMediaType,
        Internal,
        Unavailable,
    )),
    modifiers(&BearerKey),
    tags(
        (name = "jobs", description = "Producing and managing jobs."),
        (name = "workflows", description = "Jobs that wait for other jobs."),
        (name = "workers", description = "Claiming jobs and reporting on them, under a lease."),
        (name = "queues", description = "Queue stats, settings, pausing and bulk replay."),
        (name = "schedules", description = "Cron timetables that enqueue jobs, their runs, and a preview of cron expressions."),
        (name = "admin", description = "Tenants, keys and metrics: admin keys only."),
        (name = "service", description = "Health and this document (no key needed), and who a key is."),
    )
)]
struct ApiDoc;

/// Adds the `api_key` bearer scheme that the `/v1` routes and `/metrics`
/// name in their `security`.
struct BearerKey;

impl Modify for BearerKey {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "`Authorization: Bearer <api key>`. A key belongs to one tenant; a missing, \
                 unknown or revoked key is 401.",
            ))
            .build();
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme(API_KEY, SecurityScheme::Http(scheme));
    }
}

/// An `Option<T>` request body in an annotation means that the body may be
/// omitted (an [`OptionalJson`](crate::OptionalJson) body), not that it may
/// be JSON `null`: of what utoipa makes of it, this keeps the body not
/// required and drops the `null` choice from its schema.
struct OptionalBodies;

impl Modify for OptionalBodies {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let is_null = |s: &RefOr<Schema>| match s {
            RefOr::T(Schema::Object(o)) => o.schema_type == SchemaType::Type(Type::Null),
            _ => false,
        };
        let optional_bodies = doc
            .paths
            .paths
            .values_mut()
            .flat_map(operations)
            .filter_map(|op| op.request_body.as_mut())
            .filter(|body| body.required.is_none());
        for body in optional_bodies {
            for content in body.content.values_mut() {
                if let Some(RefOr::T(Schema::OneOf(one_of))) = &content.schema {
                    let mut rest = one_of.items.iter().filter(|s| !is_null(s));
                    if let (Some(schema), None) = (rest.next(), rest.next()) {
                        content.schema = Some(schema.clone());
                    }
                }
            }
        }
    }
}

/// Documents, once, what every keyed route shares (`routes::api` calls it
/// on `/v1` and `/metrics`): the `api_key` requirement and the 401, 500 and
/// 503 answers; with a request body, 400, 413 and 415 (what `ApiJson` and
/// `OptionalJson` answer); with the `admin` tag, 403. An answer that a
/// route documents itself is kept.
pub(crate) fn keyed(doc: &mut utoipa::openapi::OpenApi) {
    for operation in doc.paths.paths.values_mut().flat_map(operations) {
        let key = SecurityRequirement::new(API_KEY, Vec::<String>::new());
        operation.security = Some(vec![key]);
        let mut shared = vec![
            Unauthenticated::by_ref(),
            Internal::by_ref(),
            Unavailable::by_ref(),
        ];
        if operation.request_body.is_some() {
            shared.extend([
                BadRequest::by_ref(),
                PayloadTooLarge::by_ref(),
                UnsupportedMediaType::by_ref(),
            ]);
        }
        if operation.tags.iter().flatten().any(|tag| tag == "admin") {
            shared.push(PermissionDenied::by_ref());
        }
        for (status, answer) in shared {
            operation
                .responses
                .responses
                .entry(status)
                .or_insert(answer);
        }
    }
}

/// The operations of a path item, whatever their method.
fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .flatten()
}

/// The OpenAPI 3.1 document of the whole HTTP surface.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = crate::routes::api(|v1| v1).into_openapi();
    OptionalBodies.modify(&mut doc);
    tether_api::bound(&mut doc);
    doc
}

/// The document before the routes add their operations (see [`ApiDoc`]).
pub(crate) fn base() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// [`openapi`] as pretty-printed JSON with a final newline, as committed in
/// `docs/openapi.json` (keys in a stable order).
pub fn openapi_json() -> String {
    let mut json = openapi()
        .to_pretty_json()
        .expect("an OpenAPI document always serializes");
    json.push('\n');
    json
}

/// Serve this document.
///
/// The OpenAPI 3.1 document of the HTTP API, generated from the server's
/// code. No key needed.
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    tag = "service",
    responses(
        (status = 200, description = "This document.", content_type = "application/json", body = Object),
    )
)]
pub(crate) async fn serve() -> impl IntoResponse {
    static DOC: OnceLock<String> = OnceLock::new();
    (
        [(CONTENT_TYPE, "application/json")],
        DOC.get_or_init(openapi_json).as_str(),
    )
}
