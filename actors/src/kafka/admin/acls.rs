//! ACL RPCs, apart from the rest of the admin surface because ACL sync is
//! its own concern with its own types (Kafka's numeric resource, pattern,
//! operation and permission codes) that nothing else in the mirror touches.

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};

use super::{s, Admin};
use crate::kafka::error::{KafkaError, Result};

/// An ACL binding. Numeric codes are Kafka's (`AclOperation`, `ResourceType`, …).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AclBinding {
    /// 2 topic, 3 group, 4 cluster, 5 transactional id, 6 delegation token, 7 user.
    pub resource_type: i8,
    /// Resource name.
    pub resource_name: String,
    /// 3 literal, 4 prefixed.
    pub pattern_type: i8,
    /// `User:alice`.
    pub principal: String,
    /// `*` or an IP.
    pub host: String,
    /// 2 all, 3 read, 4 write, 5 create, 6 delete, 7 alter, 8 describe, …
    pub operation: i8,
    /// 2 deny, 3 allow.
    pub permission_type: i8,
}

/// An ACL filter; `None` matches anything. Codes as in [`AclBinding`], plus
/// 1 = ANY for types, patterns, operations and permissions.
#[derive(Debug, Clone, Default)]
pub struct AclFilter {
    /// Resource type (1 = any).
    pub resource_type: i8,
    /// Resource name.
    pub resource_name: Option<String>,
    /// Pattern type (1 = any, 2 = match).
    pub pattern_type: i8,
    /// Principal.
    pub principal: Option<String>,
    /// Host.
    pub host: Option<String>,
    /// Operation (1 = any).
    pub operation: i8,
    /// Permission (1 = any).
    pub permission_type: i8,
}

impl AclFilter {
    /// Matches every ACL.
    pub fn any() -> Self {
        AclFilter {
            resource_type: 1,
            pattern_type: 1,
            operation: 1,
            permission_type: 1,
            ..Default::default()
        }
    }
}

impl Admin {
    /// DescribeAcls.
    pub async fn describe_acls(&self, filter: &AclFilter) -> Result<Vec<AclBinding>> {
        let req = DescribeAclsRequest::default()
            .with_resource_type_filter(filter.resource_type)
            .with_resource_name_filter(filter.resource_name.as_deref().map(s))
            .with_pattern_type_filter(filter.pattern_type)
            .with_principal_filter(filter.principal.as_deref().map(s))
            .with_host_filter(filter.host.as_deref().map(s))
            .with_operation(filter.operation)
            .with_permission_type(filter.permission_type);
        let resp = self.client.send_any(&req).await?;
        KafkaError::check(
            resp.error_code,
            || "DescribeAcls".into(),
            resp.error_message.as_deref(),
        )?;
        let mut out = Vec::new();
        for r in resp.resources {
            for a in r.acls {
                out.push(AclBinding {
                    resource_type: r.resource_type,
                    resource_name: r.resource_name.to_string(),
                    pattern_type: r.pattern_type,
                    principal: a.principal.to_string(),
                    host: a.host.to_string(),
                    operation: a.operation,
                    permission_type: a.permission_type,
                });
            }
        }
        out.sort();
        Ok(out)
    }

    /// CreateAcls.
    pub async fn create_acls(&self, acls: &[AclBinding]) -> Result<()> {
        let req = CreateAclsRequest::default().with_creations(
            acls.iter()
                .map(|a| {
                    AclCreation::default()
                        .with_resource_type(a.resource_type)
                        .with_resource_name(s(&a.resource_name))
                        .with_resource_pattern_type(a.pattern_type)
                        .with_principal(s(&a.principal))
                        .with_host(s(&a.host))
                        .with_operation(a.operation)
                        .with_permission_type(a.permission_type)
                })
                .collect(),
        );
        let resp = self.client.send_any(&req).await?;
        for r in resp.results {
            KafkaError::check(
                r.error_code,
                || "CreateAcls".into(),
                r.error_message.as_deref(),
            )?;
        }
        Ok(())
    }

    /// DeleteAcls; returns the ACLs that were deleted.
    pub async fn delete_acls(&self, filters: &[AclFilter]) -> Result<Vec<AclBinding>> {
        let req = DeleteAclsRequest::default().with_filters(
            filters
                .iter()
                .map(|f| {
                    DeleteAclsFilter::default()
                        .with_resource_type_filter(f.resource_type)
                        .with_resource_name_filter(f.resource_name.as_deref().map(s))
                        .with_pattern_type_filter(f.pattern_type)
                        .with_principal_filter(f.principal.as_deref().map(s))
                        .with_host_filter(f.host.as_deref().map(s))
                        .with_operation(f.operation)
                        .with_permission_type(f.permission_type)
                })
                .collect(),
        );
        let resp = self.client.send_any(&req).await?;
        let mut out = Vec::new();
        for r in resp.filter_results {
            KafkaError::check(
                r.error_code,
                || "DeleteAcls".into(),
                r.error_message.as_deref(),
            )?;
            for m in r.matching_acls {
                KafkaError::check(
                    m.error_code,
                    || "DeleteAcls".into(),
                    m.error_message.as_deref(),
                )?;
                out.push(AclBinding {
                    resource_type: m.resource_type,
                    resource_name: m.resource_name.to_string(),
                    pattern_type: m.pattern_type,
                    principal: m.principal.to_string(),
                    host: m.host.to_string(),
                    operation: m.operation,
                    permission_type: m.permission_type,
                });
            }
        }
        Ok(out)
    }
}
