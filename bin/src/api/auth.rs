//! The bearer-token check in front of every admin route. Everything is
//! behind it, `/metrics`, `/health` and `/ui` included: a Prometheus
//! scraper can send a bearer token, and a loopback-only daemon needs no
//! token at all.

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header;
use actix_web::middleware::Next;
use actix_web::web::Data;
use actix_web::HttpResponse;
use kmirror_actors::node::NodeError;

use crate::admin_auth::AdminToken;

/// The error code of a missing or wrong token (HTTP 401).
pub const AUTHENTICATION_FAILED: &str = "AUTHENTICATION_FAILED";

/// Passes a request carrying the token in `Data<AdminToken>`, or every
/// request when the app has none; anything else gets 401 and never reaches
/// a handler. Neither the presented nor the expected token is logged.
pub async fn require_token(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let allowed = match req.app_data::<Data<AdminToken>>() {
        None => true,
        Some(token) => token.accepts(
            req.headers()
                .get(header::AUTHORIZATION)
                .map(|v| v.as_bytes()),
        ),
    };
    if allowed {
        return Ok(next.call(req).await?.map_into_left_body());
    }
    let answer = HttpResponse::Unauthorized()
        .insert_header((header::WWW_AUTHENTICATE, "Bearer realm=\"kmirror\""))
        .json(NodeError::new(
            AUTHENTICATION_FAILED,
            "missing or wrong admin token: send Authorization: Bearer <admin_token> (the CLI reads KMIRROR_ADMIN_TOKEN)",
        ));
    Ok(req.into_response(answer).map_into_right_body())
}
