//! `Body<T>`: a request body that must be a JSON object.
//!
//! serde reads a struct from a JSON array too (its fields in order), so
//! with actix's `Json<T>` alone `[]` was a valid verify request, run with
//! every default (found by the bad-input suite). Every body the API takes
//! is an object; anything else is a 400 naming what came instead.

use std::future::Future;
use std::pin::Pin;

use actix_web::dev::Payload;
use actix_web::web::Json;
use actix_web::{FromRequest, HttpRequest};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::ApiError;

/// The body, read through the API's `JsonConfig` (size limit, errors).
pub struct Body<T>(pub T);

impl<T> Body<T> {
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T: DeserializeOwned + 'static> FromRequest for Body<T> {
    type Error = actix_web::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let json = Json::<Value>::from_request(req, payload);
        Box::pin(async move {
            let Json(value) = json.await?;
            let kind = match &value {
                Value::Object(_) => None,
                Value::Array(_) => Some("an array"),
                Value::Null => Some("null"),
                Value::Bool(_) => Some("a boolean"),
                Value::Number(_) => Some("a number"),
                Value::String(_) => Some("a string"),
            };
            if let Some(kind) = kind {
                return Err(ApiError::invalid(format!(
                    "bad JSON body: expected an object, got {kind}"
                ))
                .into());
            }
            serde_json::from_value(value)
                .map(Body)
                .map_err(|e| ApiError::invalid(format!("bad JSON body: {e}")).into())
        })
    }
}
