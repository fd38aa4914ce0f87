//! ACL sync: the source's bindings that `acls.include` selects — and every
//! topic or group DENY — are created on the destination; a destination
//! binding is deleted only when kmirror created it (its `AclSync` record)
//! and the source no longer has it. An operator's own bindings are never
//! touched, and kmirror's own write fences on the source (`SourceFence`)
//! are never copied.
//!
//! A pass never widens access, even for a moment: DENYs are created before
//! the ALLOWs (which wait if a DENY could not be created), and ALLOWs are
//! deleted before DENYs.

use std::collections::{BTreeMap, BTreeSet};

use kmirror_events::sync::AclEntry;
use kmirror_events::{AclSyncKey, Command, MirrorStateImage, SyncSettings};

use super::{read_image, record, Shared, SyncError};
use crate::cluster::{acl_binding, acl_entry, AclBinding, ClusterError, Doing};
use crate::kafka::{KafkaError, ResponseError};

fn security_disabled(e: &KafkaError) -> bool {
    e.response_error() == Some(ResponseError::SecurityDisabled)
}

/// One ACL pass; `counts` gains (created, deleted).
pub(super) async fn sync_acls(
    shared: &Shared,
    image: &MirrorStateImage,
    settings: &SyncSettings,
    counts: &mut (u64, u64),
) -> Result<(), SyncError> {
    let spec = &shared.spec;
    let owned: BTreeSet<String> = image
        .acls()
        .filter(|(k, v)| k.mirror_name == spec.mirror && v.owned_by_kmirror)
        .map(|(k, _)| k.binding.clone())
        .collect();
    let source = match spec.source.describe_acls().await {
        Ok(a) => a,
        // No authorizer on the source: nothing to copy, and nothing we
        // created can be said to be gone from it.
        Err(e) if security_disabled(&e) => return Ok(()),
        Err(source) => return Err(ClusterError::new("describe source ACLs", source).into()),
    };
    let mut wanted: BTreeMap<String, AclEntry> = source
        .iter()
        .filter_map(acl_entry)
        .filter(|e| settings.acls.syncs(e))
        .map(|e| (e.canonical(), e))
        .collect();
    if !wanted.is_empty() {
        // kmirror's own write fences on the source (a planned switchover)
        // are never copied: they would fence the destination that takes
        // over. A fence is recorded before its ACL is created, so an image
        // read after the source's ACLs knows every fence they show.
        let now = read_image(shared).await?;
        for (k, _) in now.source_fences() {
            wanted.remove(&k.binding);
        }
    }
    if wanted.is_empty() && owned.is_empty() {
        return Ok(());
    }
    let present: BTreeSet<String> = spec
        .destination
        .describe_acls()
        .await
        .doing(|| "describe destination ACLs".into())?
        .iter()
        .filter_map(acl_entry)
        .map(|e| e.canonical())
        .collect();
    let create: Vec<(&String, &AclEntry)> = wanted
        .iter()
        .filter(|(k, _)| !present.contains(*k))
        .collect();
    for (k, _) in &create {
        record(
            shared,
            Command::RecordAclCreated {
                key: AclSyncKey {
                    mirror_name: spec.mirror.clone(),
                    binding: (*k).clone(),
                },
            },
        )
        .await?;
    }
    let (denies, allows): (Vec<_>, Vec<_>) = create
        .iter()
        .partition(|(_, e)| e.permission_type == "DENY");
    for batch in [denies, allows] {
        if batch.is_empty() {
            continue;
        }
        let bindings: Vec<AclBinding> = batch.iter().filter_map(|(_, e)| acl_binding(e)).collect();
        spec.destination
            .create_acls(bindings)
            .await
            .doing(|| "create destination ACLs".into())?;
        counts.0 += batch.len() as u64;
        tracing::info!(mirror = %spec.mirror, acls = batch.len(), "created ACLs on the destination");
    }
    let mut gone: Vec<&String> = owned.iter().filter(|k| !wanted.contains_key(*k)).collect();
    // ALLOWs first: a DENY goes only once what it restrains is gone.
    gone.sort_by_key(|k| AclEntry::parse_canonical(k).is_some_and(|e| e.permission_type == "DENY"));
    for k in gone {
        let key = AclSyncKey {
            mirror_name: spec.mirror.clone(),
            binding: k.clone(),
        };
        record(shared, Command::RecordAclDeleted { key: key.clone() }).await?;
        if !present.contains(k) {
            continue;
        }
        let Some(binding) = AclEntry::parse_canonical(k).as_ref().and_then(acl_binding) else {
            continue;
        };
        if let Err(e) = spec.destination.delete_acls(vec![binding]).await {
            // Still there: keep owning it so the next pass retries.
            let _ = record(shared, Command::RecordAclCreated { key }).await;
            return Err(ClusterError::new(format!("delete destination ACL {k}"), e).into());
        }
        counts.1 += 1;
        tracing::info!(mirror = %spec.mirror, acl = %k, "deleted an ACL kmirror had created");
    }
    Ok(())
}
