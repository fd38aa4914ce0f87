//! The admin API's one error type and its code-to-status mapping.

use actix_web::error::JsonPayloadError;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, ResponseError};
use kmirror_actors::node::NodeError;

/// An error on its way to the client.
#[derive(Debug)]
pub struct ApiError(pub NodeError);

impl ApiError {
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError(NodeError::new("INVALID_REQUEST", message))
    }
}

impl From<NodeError> for ApiError {
    fn from(e: NodeError) -> Self {
        ApiError(e)
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The largest request body the API reads. The largest legitimate one is
/// a mirror's properties (a few KiB, inline PEM certificates included) or
/// a start naming every topic of a big cluster (1 000 names of at most 249
/// bytes); anything larger is a mistake, refused before it is buffered.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// A body the JSON extractor refused: 413 when it is over
/// [`MAX_BODY_BYTES`], 400 naming what is wrong otherwise.
pub fn body_error(e: JsonPayloadError) -> ApiError {
    match e {
        JsonPayloadError::OverflowKnownLength { length, limit } => ApiError(NodeError::new(
            "PAYLOAD_TOO_LARGE",
            format!("the body is {length} bytes; the admin API takes at most {limit}"),
        )),
        JsonPayloadError::Overflow { limit } => ApiError(NodeError::new(
            "PAYLOAD_TOO_LARGE",
            format!("the body is over {limit} bytes, the most the admin API takes"),
        )),
        other => ApiError::invalid(format!("bad JSON body: {other}")),
    }
}

/// The one mapping from KIP / Kafka error names to HTTP statuses.
pub fn status_for(code: &str) -> StatusCode {
    match code {
        "INVALID_REQUEST"
        | "INVALID_CONFIG"
        | "INVALID_CLUSTER_MIRROR_NAME"
        | "INVALID_TOPIC_EXCEPTION" => StatusCode::BAD_REQUEST,
        "CLUSTER_MIRROR_AUTHORIZATION_FAILED"
        | "TOPIC_AUTHORIZATION_FAILED"
        | "CLUSTER_AUTHORIZATION_FAILED" => StatusCode::FORBIDDEN,
        "UNKNOWN_CLUSTER_MIRROR"
        | "TOPIC_NOT_IN_CLUSTER_MIRROR"
        | "UNKNOWN_TOPIC_OR_PARTITION"
        | "NOT_FOUND" => StatusCode::NOT_FOUND,
        "METHOD_NOT_ALLOWED" => StatusCode::METHOD_NOT_ALLOWED,
        super::auth::AUTHENTICATION_FAILED => StatusCode::UNAUTHORIZED,
        "PAYLOAD_TOO_LARGE" => StatusCode::PAYLOAD_TOO_LARGE,
        "CLUSTER_MIRROR_ALREADY_EXISTS"
        | "TOPIC_ALREADY_IN_CLUSTER_MIRROR"
        | "MIRROR_TOPIC_ALREADY_PAUSED"
        | "MIRROR_TOPIC_NOT_PAUSED"
        | "MIRROR_TOPIC_BEING_STOPPED"
        | "MIRROR_TOPIC_NOT_STOPPED"
        | "CLUSTER_MIRROR_NOT_EMPTY"
        | "INVALID_CLUSTER_MIRROR_STATES"
        | "INVALID_CLUSTER_MIRROR_STATE"
        | "FENCED_STATE_EPOCH"
        | "TOPIC_ALREADY_EXISTS"
        | "READ_ONLY_TOPIC" => StatusCode::CONFLICT,
        "UNSUPPORTED_VERSION" => StatusCode::NOT_IMPLEMENTED,
        "NOT_COORDINATOR"
        | "COORDINATOR_NOT_AVAILABLE"
        | "COORDINATOR_LOAD_IN_PROGRESS"
        | "SOURCE_METADATA_NOT_AVAILABLE"
        | "MIRROR_CONFIG_NOT_AVAILABLE"
        | "NETWORK_EXCEPTION"
        | "REQUEST_TIMED_OUT" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        status_for(&self.0.code)
    }

    fn error_response(&self) -> HttpResponse {
        HttpResponse::build(self.status_code()).json(&self.0)
    }
}

impl actix_web::Responder for ApiError {
    type Body = actix_web::body::BoxBody;

    fn respond_to(self, _: &HttpRequest) -> HttpResponse {
        self.error_response()
    }
}

pub type Reply = Result<HttpResponse, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        assert_eq!(status_for("MIRROR_TOPIC_NOT_PAUSED"), StatusCode::CONFLICT);
        assert_eq!(status_for("UNKNOWN_CLUSTER_MIRROR"), StatusCode::NOT_FOUND);
        assert_eq!(
            status_for("INVALID_CLUSTER_MIRROR_STATES"),
            StatusCode::CONFLICT
        );
        assert_eq!(status_for("INVALID_CONFIG"), StatusCode::BAD_REQUEST);
        assert_eq!(
            status_for("PAYLOAD_TOO_LARGE"),
            StatusCode::PAYLOAD_TOO_LARGE
        );
        assert_eq!(
            status_for("SOMETHING_ELSE"),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
