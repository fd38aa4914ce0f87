//! Group membership on the destination cluster, the way Kafka Connect's
//! workers share work: the classic group protocol with a protocol type of
//! our own (`kmirror`), each member's metadata carrying its admin URL,
//! capacity and the units it still acts on, and the leader running the
//! incremental cooperative assignor of `kmirror_events::assign`.
//! Longer than 800 lines: its unit tests (the code alone is under 790).
//!
//! The running member is a task ([`MembershipHandle::start`]) that publishes
//! its [`Membership`] on a `watch`. Whoever acts on units must act only on
//! `assignment`, and stop at once when a unit leaves it: a unit is revoked
//! before it is given to another member, and a member the coordinator says
//! is out (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID)
//! publishes an empty assignment before it rejoins. A member that cannot
//! reach its coordinator for a session timeout assumes it is out too.
//! Membership is still not a fence — a paused process acts until it learns
//! it is out — so the units' writes must be fenced as well.
//!
//! Give the member a `KafkaClient` of its own: the broker reads one request
//! at a time per connection, so a JoinGroup parked for the rebalance would
//! hold every other request sent on that connection behind it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    GroupId, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    SyncGroupRequest,
};
use kafka_protocol::protocol::StrBytes;
use kmirror_events::assign::{assign_weighted, reweighs, MemberReport};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::admin::Admin;
use super::client::KafkaClient;
use super::error::{KafkaError, ResponseError, Result};
use super::lease::Lease;

/// The group's protocol type, as `kafka-consumer-groups.sh` shows it.
pub const PROTOCOL_TYPE: &str = "kmirror";
/// The one protocol a member offers; its metadata is [`MemberMetadata`] in
/// encoding version 1.
pub const PROTOCOL_NAME: &str = "kmirror-v1";
/// Version of the metadata and assignment encodings. A later version only
/// appends fields, so any version ≥ 1 is read by its version-1 prefix.
const ENCODING_VERSION: i16 = 1;
/// How long the units' weights must stay unchanged before the leader
/// weighs them against its last plan: a mirror's topics start one after
/// another, and each rebalance hands shards over.
const WEIGHTS_SETTLE: Duration = Duration::from_secs(10);
/// The longest weights that keep changing put a rebalance off: topics
/// discovered one after another, a shard read again.
const WEIGHTS_SETTLE_MAX: Duration = Duration::from_secs(60);

/// What a member tells the others about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberMetadata {
    /// Where its admin API answers (so any node can forward a request).
    pub admin_url: String,
    /// Relative share of the work it takes (0: none).
    pub capacity: u32,
}

/// Timeouts, with Kafka Connect's defaults (`DistributedConfig`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberSettings {
    /// Silence after which the coordinator drops the member (broker bounds:
    /// `group.min/max.session.timeout.ms`, 6 s to 30 min by default).
    pub session_timeout: Duration,
    /// Interval between heartbeats: how fast a member learns of a rebalance.
    pub heartbeat_interval: Duration,
    /// How long the coordinator waits for every member to rejoin; a
    /// JoinGroup can legitimately be held that long.
    pub rebalance_timeout: Duration,
}

impl Default for MemberSettings {
    fn default() -> Self {
        MemberSettings {
            session_timeout: Duration::from_millis(10_000),
            heartbeat_interval: Duration::from_millis(3_000),
            rebalance_timeout: Duration::from_millis(60_000),
        }
    }
}

/// A member of the group, as the leader saw it in this generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMember {
    /// The coordinator's member id.
    pub member_id: String,
    /// Its admin API.
    pub admin_url: String,
    /// Its capacity.
    pub capacity: u32,
    /// The units it was assigned in this generation (what routing needs:
    /// which node to send a request about a unit to).
    pub units: BTreeSet<String>,
}

/// This member's view of the group. While out of the group (joining, or
/// told it is out) `generation_id` is -1 and `assignment` is empty.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Membership {
    /// The generation the assignment belongs to.
    pub generation_id: i32,
    /// This member's id (empty before the coordinator gave one).
    pub member_id: String,
    /// The leader's member id.
    pub leader: String,
    /// The units this member may act on, and only these.
    pub assignment: BTreeSet<String>,
    /// Every member of the generation, sorted by member id.
    pub members: Vec<GroupMember>,
    /// The error with which the coordinator last told this member it was
    /// out (kept across rejoins, for diagnosis).
    pub last_expulsion: Option<ResponseError>,
    /// The lease's term when this was published ([`Lease::term`]): the
    /// assignment is the member's only while the term lasts. A watcher
    /// that sees a later term was out in between, even if it never saw
    /// the empty assignment (a watch keeps only the newest value).
    pub lease_term: u64,
}

impl Membership {
    fn out(member_id: &str, last_expulsion: Option<ResponseError>, lease_term: u64) -> Self {
        Membership {
            generation_id: -1,
            member_id: member_id.to_owned(),
            last_expulsion,
            lease_term,
            ..Membership::default()
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Control {
    Run,
    Paused,
    Close,
}

/// Tells a member which units its caller still acts on. Once told, a
/// member that had units revoked rejoins only after the caller has let go
/// of them (or half a session timeout has passed), so their next owner
/// starts after the previous one released them — a clean handover — rather
/// than beside it, where only the fences keep order.
#[derive(Clone)]
pub struct HeldUnits(std::sync::Arc<watch::Sender<Option<BTreeSet<String>>>>);

impl HeldUnits {
    pub fn report(&self, units: BTreeSet<String>) {
        self.0.send_replace(Some(units));
    }
}

/// A running member. Dropping it stops the task at once (without
/// LeaveGroup: the coordinator drops the member after its session timeout);
/// [`MembershipHandle::close`] leaves cleanly.
pub struct MembershipHandle {
    membership: watch::Receiver<Membership>,
    control: watch::Sender<Control>,
    held: HeldUnits,
    lease: Lease,
    task: Option<JoinHandle<()>>,
}

impl MembershipHandle {
    /// Joins `group_id` on the cluster of `client` (a client of its own, see
    /// the module doc) and keeps the membership until closed. `units` is the
    /// set of units to place; when it changes, a leader starts a rebalance.
    pub fn start(
        client: KafkaClient,
        group_id: &str,
        metadata: MemberMetadata,
        settings: MemberSettings,
        units: watch::Receiver<BTreeSet<String>>,
    ) -> Self {
        Self::start_weighted(client, group_id, metadata, settings, units, None)
    }

    /// [`Self::start`] with the units' weights (a unit missing from them
    /// weighs 1): a leader balances members by weight, and rebalances
    /// once the weights, settled, leave its last plan uneven.
    pub fn start_weighted(
        client: KafkaClient,
        group_id: &str,
        metadata: MemberMetadata,
        settings: MemberSettings,
        units: watch::Receiver<BTreeSet<String>>,
        weights: Option<watch::Receiver<BTreeMap<String, u64>>>,
    ) -> Self {
        let (tx, membership) = watch::channel(Membership::out("", None, 0));
        let (control, control_rx) = watch::channel(Control::Run);
        let (held, held_rx) = watch::channel(None);
        let lease = Lease::default();
        let member = Member {
            held: held_rx,
            lease: lease.clone(),
            admin: Admin::new(client.clone()),
            client,
            group: group_id.to_owned(),
            metadata,
            settings,
            units,
            weights,
            reports: Vec::new(),
            tx,
            coordinator: None,
            member_id: String::new(),
            generation: -1,
            assignment: BTreeSet::new(),
            owned_generation: -1,
            previous: BTreeMap::new(),
            last_expulsion: None,
        };
        MembershipHandle {
            membership,
            control,
            held: HeldUnits(std::sync::Arc::new(held)),
            lease,
            task: Some(tokio::spawn(member.run(control_rx))),
        }
    }

    /// The licence to write this membership keeps renewed (see [`Lease`]):
    /// hand it to every producer that writes the assigned units.
    pub fn lease(&self) -> Lease {
        self.lease.clone()
    }

    /// Where the caller reports the units it still acts on.
    pub fn held_reporter(&self) -> HeldUnits {
        self.held.clone()
    }

    /// The current membership, updated at every change.
    pub fn membership(&self) -> watch::Receiver<Membership> {
        self.membership.clone()
    }

    /// Freezes the member as a stopped process would be (no heartbeat, no
    /// reaction, its last membership left as it was), or thaws it: for
    /// tests and fault drills.
    pub fn pause(&self, paused: bool) {
        let _ = self.control.send(if paused {
            Control::Paused
        } else {
            Control::Run
        });
    }

    /// Leaves the group (LeaveGroup, under the request timeout), publishes an
    /// empty assignment and waits for the task to end.
    pub async fn close(mut self) {
        let _ = self.control.send(Control::Close);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for MembershipHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Why the task leaves the stable state.
enum Next {
    Rejoin,
    Close,
}

struct Member {
    /// What the caller still acts on (None: it does not say).
    held: watch::Receiver<Option<BTreeSet<String>>>,
    /// Renewed by every heartbeat and sync the coordinator accepts.
    lease: Lease,
    client: KafkaClient,
    admin: Admin,
    group: String,
    metadata: MemberMetadata,
    settings: MemberSettings,
    units: watch::Receiver<BTreeSet<String>>,
    weights: Option<watch::Receiver<BTreeMap<String, u64>>>,
    /// What the members reported at the leader's last plan.
    reports: Vec<MemberReport>,
    tx: watch::Sender<Membership>,
    coordinator: Option<i32>,
    member_id: String,
    generation: i32,
    assignment: BTreeSet<String>,
    /// The generation that granted `assignment`.
    owned_generation: i32,
    /// The leader's last plan, for its tie-breaks.
    previous: BTreeMap<String, BTreeSet<String>>,
    last_expulsion: Option<ResponseError>,
}

impl Member {
    async fn run(mut self, mut control: watch::Receiver<Control>) {
        let mut attempt = 0u32;
        loop {
            if !wait_unpaused(&mut control).await {
                break;
            }
            let joined = tokio::select! {
                r = self.join_and_sync() => r,
                _ = wait_for(&mut control, Control::Close) => break,
            };
            match joined {
                Ok(true) => {
                    attempt = 0;
                    match self.stay(&mut control).await {
                        Next::Rejoin => continue,
                        Next::Close => break,
                    }
                }
                // Revoked units were released: the next round places them.
                Ok(false) => attempt = 0,
                Err(e) => {
                    if !self.on_error(&e) {
                        tracing::warn!(group = %self.group, error = %e, "group join failed; retrying");
                        let backoff = self.client.retry_backoff(attempt);
                        attempt = attempt.saturating_add(1);
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            _ = wait_for(&mut control, Control::Close) => break,
                        }
                    }
                }
            }
        }
        self.leave().await;
    }

    /// Reacts to an error of the coordinator's: `true` when the error is
    /// the protocol's signal to rejoin at once.
    fn on_error(&mut self, e: &KafkaError) -> bool {
        match e.response_error() {
            Some(
                err @ (ResponseError::UnknownMemberId
                | ResponseError::IllegalGeneration
                | ResponseError::FencedInstanceId),
            ) => {
                // Out of the group: stop acting on every unit first.
                if err != ResponseError::IllegalGeneration {
                    self.member_id.clear();
                }
                self.expel(Some(err));
                true
            }
            Some(ResponseError::RebalanceInProgress) => true,
            Some(
                ResponseError::NotCoordinator
                | ResponseError::CoordinatorNotAvailable
                | ResponseError::CoordinatorLoadInProgress,
            ) => {
                self.coordinator = None;
                false
            }
            _ => {
                if e.needs_metadata_refresh() {
                    self.coordinator = None;
                }
                false
            }
        }
    }

    fn expel(&mut self, why: Option<ResponseError>) {
        tracing::info!(group = %self.group, member = %self.member_id, ?why, "out of the group; releasing every unit");
        self.lease.revoke();
        self.assignment.clear();
        self.owned_generation = -1;
        self.generation = -1;
        if why.is_some() {
            self.last_expulsion = why;
        }
        self.tx.send_replace(Membership::out(
            &self.member_id,
            self.last_expulsion,
            self.lease.term(),
        ));
    }

    async fn coordinator(&mut self) -> Result<i32> {
        if let Some(node) = self.coordinator {
            return Ok(node);
        }
        let node = self.admin.find_coordinator(&self.group).await?;
        self.coordinator = Some(node);
        Ok(node)
    }

    /// A rebalance call may be held by the coordinator for the rebalance
    /// timeout; Kafka's clients allow 5 s on top of it.
    fn rebalance_call_timeout(&self) -> Duration {
        self.settings.rebalance_timeout + Duration::from_secs(5)
    }

    /// One JoinGroup/SyncGroup round. `Ok(true)`: stable with the new
    /// assignment; `Ok(false)`: units were revoked, rejoin now.
    async fn join_and_sync(&mut self) -> Result<bool> {
        let joined = self.join().await?;
        let assignments = if joined.leader == joined.member_id {
            self.lead(&joined)
        } else {
            Vec::new()
        };
        let node = self.coordinator().await?;
        let conn = self.client.connection(node).await?;
        let v = conn.version::<SyncGroupRequest>()?;
        let mut req = SyncGroupRequest::default()
            .with_group_id(GroupId(s(&self.group)))
            .with_generation_id(joined.generation_id)
            .with_member_id(s(&self.member_id))
            .with_assignments(assignments);
        if v >= 5 {
            req = req
                .with_protocol_type(Some(s(PROTOCOL_TYPE)))
                .with_protocol_name(Some(s(PROTOCOL_NAME)));
        }
        let sent = std::time::Instant::now();
        let resp = conn
            .send_versioned(&req, v, self.rebalance_call_timeout())
            .await?;
        KafkaError::check(
            resp.error_code,
            || format!("SyncGroup {}", self.group),
            None,
        )?;
        self.lease.extend_to(sent + self.settings.session_timeout);
        let (generation, units, members) = decode_assignment(&resp.assignment)?;
        let revoked: BTreeSet<String> = self.assignment.difference(&units).cloned().collect();
        self.generation = joined.generation_id;
        self.assignment = units;
        self.owned_generation = generation;
        self.tx.send_replace(Membership {
            generation_id: joined.generation_id,
            member_id: self.member_id.clone(),
            leader: joined.leader.to_string(),
            assignment: self.assignment.clone(),
            members,
            last_expulsion: self.last_expulsion,
            lease_term: self.lease.term(),
        });
        tracing::debug!(group = %self.group, member = %self.member_id, generation, units = self.assignment.len(), revoked = revoked.len(), "synced");
        if !revoked.is_empty() {
            self.wait_released(&revoked).await;
        }
        Ok(revoked.is_empty())
    }

    /// Waits (at most half a session timeout, so the session survives)
    /// until the caller no longer acts on any of `revoked`.
    async fn wait_released(&mut self, revoked: &BTreeSet<String>) {
        let limit = self.settings.session_timeout / 2;
        let released = async {
            loop {
                let still = match &*self.held.borrow_and_update() {
                    None => false,
                    Some(held) => !held.is_disjoint(revoked),
                };
                if !still || self.held.changed().await.is_err() {
                    return;
                }
            }
        };
        if tokio::time::timeout(limit, released).await.is_err() {
            tracing::warn!(group = %self.group, units = revoked.len(), "revoked units not released within half a session timeout; rejoining anyway (their writes are fenced)");
        }
    }

    async fn join(&mut self) -> Result<JoinGroupResponse> {
        loop {
            let node = self.coordinator().await?;
            let conn = self.client.connection(node).await?;
            let v = conn.version::<JoinGroupRequest>()?;
            let metadata = encode_metadata(&self.metadata, &self.assignment, self.owned_generation);
            let mut req = JoinGroupRequest::default()
                .with_group_id(GroupId(s(&self.group)))
                .with_session_timeout_ms(millis(self.settings.session_timeout))
                .with_rebalance_timeout_ms(millis(self.settings.rebalance_timeout))
                .with_member_id(s(&self.member_id))
                .with_protocol_type(s(PROTOCOL_TYPE))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(s(PROTOCOL_NAME))
                    .with_metadata(metadata)]);
            if v >= 8 {
                req = req.with_reason(Some(s("kmirror node joining")));
            }
            let resp = conn
                .send_versioned(&req, v, self.rebalance_call_timeout())
                .await?;
            if resp.error_code == ResponseError::MemberIdRequired.code() {
                // KIP-394: the coordinator names us first, then we join.
                self.member_id = resp.member_id.to_string();
                continue;
            }
            KafkaError::check(
                resp.error_code,
                || format!("JoinGroup {}", self.group),
                None,
            )?;
            self.member_id = resp.member_id.to_string();
            return Ok(resp);
        }
    }

    /// The leader's part: run the assignor over every member's report.
    fn lead(&mut self, joined: &JoinGroupResponse) -> Vec<SyncGroupRequestAssignment> {
        let mut reports = Vec::new();
        let mut members = Vec::new();
        for m in &joined.members {
            let id = m.member_id.to_string();
            let (meta, owned, owned_generation) =
                decode_metadata(&m.metadata).unwrap_or_else(|e| {
                    // A member we cannot read gets no work, not a crash.
                    tracing::warn!(member = %id, error = %e, "unreadable member metadata");
                    let meta = MemberMetadata {
                        admin_url: String::new(),
                        capacity: 0,
                    };
                    (meta, BTreeSet::new(), -1)
                });
            reports.push(MemberReport {
                member_id: id.clone(),
                capacity: meta.capacity,
                owned,
                owned_generation,
            });
            members.push(GroupMember {
                member_id: id,
                admin_url: meta.admin_url,
                capacity: meta.capacity,
                units: BTreeSet::new(),
            });
        }
        members.sort_by(|a, b| a.member_id.cmp(&b.member_id));
        let units = self.units.borrow_and_update().clone();
        let plan = assign_weighted(&reports, &self.weighted(&units), &self.previous);
        tracing::info!(
            group = %self.group,
            generation = joined.generation_id,
            members = members.len(),
            units = units.len(),
            revoked = plan.revoked.values().map(BTreeSet::len).sum::<usize>(),
            "assigned"
        );
        for m in &mut members {
            m.units = plan
                .assignment
                .get(&m.member_id)
                .cloned()
                .unwrap_or_default();
        }
        self.previous = plan.assignment.clone();
        self.reports = reports;
        plan.assignment
            .iter()
            .map(|(m, units)| {
                SyncGroupRequestAssignment::default()
                    .with_member_id(s(m))
                    .with_assignment(encode_assignment(joined.generation_id, units, &members))
            })
            .collect()
    }

    /// Every unit with its weight (1 when none is known).
    fn weighted(&mut self, units: &BTreeSet<String>) -> BTreeMap<String, u64> {
        let weights = self.weights.as_mut().map(|w| w.borrow_and_update().clone());
        units
            .iter()
            .map(|u| {
                let w = weights.as_ref().and_then(|w| w.get(u).copied());
                (u.clone(), w.unwrap_or(1))
            })
            .collect()
    }

    /// The stable state: heartbeat until a rebalance, an expulsion, a
    /// change of units or of their weights (leader) or close.
    async fn stay(&mut self, control: &mut watch::Receiver<Control>) -> Next {
        let leader = self.tx.borrow().leader == self.member_id;
        let mut units_open = true;
        let mut weights_open = self.weights.is_some();
        // When the weights first changed since last weighed, and when to weigh.
        let mut reweigh_at: Option<(Instant, Instant)> = None;
        let mut last_answer = Instant::now();
        loop {
            // A pause or close may have been seen (and marked) while joining.
            if *control.borrow() != Control::Run && !wait_unpaused(control).await {
                return Next::Close;
            }
            tokio::select! {
                _ = tokio::time::sleep(self.settings.heartbeat_interval) => {}
                _ = control.changed() => {
                    if !wait_unpaused(control).await {
                        return Next::Close;
                    }
                }
                r = self.units.changed(), if leader && units_open => {
                    if r.is_ok() {
                        tracing::info!(group = %self.group, "units changed; rebalancing");
                        return Next::Rejoin;
                    }
                    // The provider is gone: the units stay as they are.
                    units_open = false;
                }
                r = changed(&mut self.weights), if leader && weights_open => {
                    match r {
                        Ok(()) => {
                            let first = reweigh_at.map_or_else(Instant::now, |(first, _)| first);
                            let at = (Instant::now() + WEIGHTS_SETTLE).min(first + WEIGHTS_SETTLE_MAX);
                            reweigh_at = Some((first, at));
                        }
                        Err(_) => weights_open = false,
                    }
                }
                _ = tokio::time::sleep_until(reweigh_at.map_or_else(Instant::now, |(_, at)| at)), if reweigh_at.is_some() => {
                    reweigh_at = None;
                    let units = self.units.borrow().clone();
                    let weights = self.weighted(&units);
                    if reweighs(&self.reports, &self.previous, &weights) {
                        tracing::info!(group = %self.group, "units' weights uneven across members; rebalancing");
                        return Next::Rejoin;
                    }
                }
            }
            let sent = std::time::Instant::now();
            match self.heartbeat().await {
                Ok(()) => {
                    last_answer = Instant::now();
                    self.lease.extend_to(sent + self.settings.session_timeout);
                }
                Err(e) => {
                    if self.on_error(&e) {
                        return Next::Rejoin;
                    }
                    tracing::warn!(group = %self.group, error = %e, "heartbeat failed");
                    if last_answer.elapsed() >= self.settings.session_timeout {
                        // The coordinator has dropped us by now, whether or
                        // not we can hear it say so.
                        self.expel(None);
                        return Next::Rejoin;
                    }
                    if self.coordinator.is_none() {
                        return Next::Rejoin;
                    }
                }
            }
        }
    }

    async fn heartbeat(&mut self) -> Result<()> {
        let node = self.coordinator().await?;
        let conn = self.client.connection(node).await?;
        let v = conn.version::<HeartbeatRequest>()?;
        let req = HeartbeatRequest::default()
            .with_group_id(GroupId(s(&self.group)))
            .with_generation_id(self.generation)
            .with_member_id(s(&self.member_id));
        // An answer later than the session timeout is worthless.
        let timeout = conn.request_timeout().min(self.settings.session_timeout);
        let resp = conn.send_versioned(&req, v, timeout).await?;
        KafkaError::check(
            resp.error_code,
            || format!("Heartbeat {}", self.group),
            None,
        )
    }

    /// LeaveGroup, so the others rebalance now rather than after our
    /// session timeout; the assignment is dropped first in any case.
    async fn leave(&mut self) {
        self.expel(None);
        if self.member_id.is_empty() {
            return;
        }
        let r = async {
            let node = self.coordinator().await?;
            let conn = self.client.connection(node).await?;
            let v = conn.version::<LeaveGroupRequest>()?;
            let req = if v >= 3 {
                LeaveGroupRequest::default()
                    .with_group_id(GroupId(s(&self.group)))
                    .with_members(vec![MemberIdentity::default()
                        .with_member_id(s(&self.member_id))
                        .with_reason((v >= 5).then(|| s("kmirror node closing")))])
            } else {
                LeaveGroupRequest::default()
                    .with_group_id(GroupId(s(&self.group)))
                    .with_member_id(s(&self.member_id))
            };
            let resp = conn.send(&req).await?;
            KafkaError::check(
                resp.error_code,
                || format!("LeaveGroup {}", self.group),
                None,
            )?;
            for m in resp.members {
                KafkaError::check(m.error_code, || format!("LeaveGroup {}", self.group), None)?;
            }
            Ok::<(), KafkaError>(())
        }
        .await;
        if let Err(e) = r {
            tracing::warn!(group = %self.group, error = %e, "LeaveGroup failed; the session timeout will drop us");
        }
    }
}

/// A change of the weights, if there are any (else never).
async fn changed(
    weights: &mut Option<watch::Receiver<BTreeMap<String, u64>>>,
) -> std::result::Result<(), watch::error::RecvError> {
    match weights {
        Some(w) => w.changed().await,
        None => std::future::pending().await,
    }
}

/// Waits while paused; `false` when told to close.
async fn wait_unpaused(control: &mut watch::Receiver<Control>) -> bool {
    loop {
        let now = *control.borrow_and_update();
        match now {
            Control::Run => return true,
            Control::Close => return false,
            Control::Paused => {
                if control.changed().await.is_err() {
                    return false;
                }
            }
        }
    }
}

async fn wait_for(control: &mut watch::Receiver<Control>, want: Control) {
    if control.wait_for(|c| *c == want).await.is_err() {
        // The handle is gone (dropped): the task is being aborted anyway.
        std::future::pending::<()>().await;
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn millis(d: Duration) -> i32 {
    d.as_millis().min(i32::MAX as u128) as i32
}

fn put_str(buf: &mut BytesMut, v: &str) {
    buf.put_i32(v.len() as i32);
    buf.put_slice(v.as_bytes());
}

fn put_units(buf: &mut BytesMut, units: &BTreeSet<String>) {
    buf.put_i32(units.len() as i32);
    for u in units {
        put_str(buf, u);
    }
}

fn bad(what: &str) -> KafkaError {
    KafkaError::Protocol(format!("{PROTOCOL_NAME} {what}"))
}

fn get_i32(buf: &mut Bytes, what: &str) -> Result<i32> {
    if buf.remaining() < 4 {
        return Err(bad(&format!("{what}: truncated")));
    }
    Ok(buf.get_i32())
}

fn get_str(buf: &mut Bytes, what: &str) -> Result<String> {
    let n =
        usize::try_from(get_i32(buf, what)?).map_err(|_| bad(&format!("{what}: bad length")))?;
    if buf.remaining() < n {
        return Err(bad(&format!("{what}: truncated")));
    }
    String::from_utf8(buf.split_to(n).to_vec()).map_err(|_| bad(&format!("{what}: not UTF-8")))
}

fn get_units(buf: &mut Bytes, what: &str) -> Result<BTreeSet<String>> {
    let n = get_i32(buf, what)?;
    (0..n.max(0)).map(|_| get_str(buf, what)).collect()
}

fn get_version(buf: &mut Bytes, what: &str) -> Result<()> {
    if buf.remaining() < 2 {
        return Err(bad(&format!("{what}: truncated")));
    }
    match buf.get_i16() {
        v if v >= ENCODING_VERSION => Ok(()),
        v => Err(bad(&format!("{what}: version {v}"))),
    }
}

/// A member's JoinGroup metadata: version, admin URL, capacity, the
/// generation that granted its units, its units.
pub fn encode_metadata(
    meta: &MemberMetadata,
    owned: &BTreeSet<String>,
    owned_generation: i32,
) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(ENCODING_VERSION);
    put_str(&mut buf, &meta.admin_url);
    buf.put_i32(meta.capacity.min(i32::MAX as u32) as i32);
    buf.put_i32(owned_generation);
    put_units(&mut buf, owned);
    buf.freeze()
}

/// Reads [`encode_metadata`]'s bytes (any version ≥ 1, by its prefix).
pub fn decode_metadata(bytes: &Bytes) -> Result<(MemberMetadata, BTreeSet<String>, i32)> {
    let mut buf = bytes.clone();
    get_version(&mut buf, "metadata")?;
    let admin_url = get_str(&mut buf, "metadata")?;
    let capacity = get_i32(&mut buf, "metadata")?.max(0) as u32;
    let owned_generation = get_i32(&mut buf, "metadata")?;
    let owned = get_units(&mut buf, "metadata")?;
    Ok((
        MemberMetadata {
            admin_url,
            capacity,
        },
        owned,
        owned_generation,
    ))
}

/// A member's SyncGroup assignment: version, generation, its units, every
/// member (id, admin URL, capacity) — followers see no one else's metadata.
pub fn encode_assignment(
    generation: i32,
    units: &BTreeSet<String>,
    members: &[GroupMember],
) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(ENCODING_VERSION);
    buf.put_i32(generation);
    put_units(&mut buf, units);
    buf.put_i32(members.len() as i32);
    for m in members {
        put_str(&mut buf, &m.member_id);
        put_str(&mut buf, &m.admin_url);
        buf.put_i32(m.capacity.min(i32::MAX as u32) as i32);
        put_units(&mut buf, &m.units);
    }
    buf.freeze()
}

/// Reads [`encode_assignment`]'s bytes. An empty assignment (a leader that
/// gave this member nothing to say) is generation -1, no units, no members.
pub fn decode_assignment(bytes: &Bytes) -> Result<(i32, BTreeSet<String>, Vec<GroupMember>)> {
    if bytes.is_empty() {
        return Ok((-1, BTreeSet::new(), Vec::new()));
    }
    let mut buf = bytes.clone();
    get_version(&mut buf, "assignment")?;
    let generation = get_i32(&mut buf, "assignment")?;
    let units = get_units(&mut buf, "assignment")?;
    let n = get_i32(&mut buf, "assignment")?;
    let members = (0..n.max(0))
        .map(|_| {
            Ok(GroupMember {
                member_id: get_str(&mut buf, "assignment")?,
                admin_url: get_str(&mut buf, "assignment")?,
                capacity: get_i32(&mut buf, "assignment")?.max(0) as u32,
                units: get_units(&mut buf, "assignment")?,
            })
        })
        .collect::<Result<_>>()?;
    Ok((generation, units, members))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_and_assignment_round_trip_and_a_later_version_is_read_by_its_prefix() {
        let meta = MemberMetadata {
            admin_url: "http://127.0.0.1:9000".into(),
            capacity: 3,
        };
        let owned: BTreeSet<String> = ["state-7".to_string(), "orders-0".to_string()].into();
        let bytes = encode_metadata(&meta, &owned, 12);
        assert_eq!(decode_metadata(&bytes).unwrap(), (meta, owned.clone(), 12));

        let members = vec![GroupMember {
            member_id: "m-1".into(),
            admin_url: "http://a".into(),
            capacity: 1,
            units: owned.clone(),
        }];
        let mut v2 = BytesMut::from(&encode_assignment(4, &owned, &members)[..]);
        v2[1] = 2; // version 2 …
        v2.put_slice(b"appended field"); // … with a field v1 does not know
        let (generation, units, got) = decode_assignment(&v2.freeze()).unwrap();
        assert_eq!((generation, units, got), (4, owned, members));
        assert!(decode_assignment(&Bytes::from_static(&[0, 1, 0])).is_err());
        assert_eq!(decode_assignment(&Bytes::new()).unwrap().0, -1);
    }
}
