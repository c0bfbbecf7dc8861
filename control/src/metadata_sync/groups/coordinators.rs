//! Where each group lives at the source: connections to the source's
//! brokers, opened on demand and kept for one round, and each group's
//! coordinator (FindCoordinator, batched from v4).

use std::collections::{BTreeMap, HashMap};

use kafka_protocol::messages::{ApiKey, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;
use ringmirror_dataplane::client::{ClientError, Connection, ConnectionOptions};
use ringmirror_protocol::error_codes as codes;

use super::{FIND_COORDINATOR_VERSIONS, GROUPS_PER_REQUEST, KEY_TYPE_GROUP, connection_failed, s};

/// The source connection and connections to other source brokers, opened
/// on demand and kept for one round.
pub(super) struct SourceBrokers<'a> {
    pub(super) source: &'a mut Connection,
    pub(super) options: ConnectionOptions,
    pub(super) others: HashMap<String, Connection>,
}

impl SourceBrokers<'_> {
    pub(super) fn is_source(&self, addr: &str) -> bool {
        addr == self.source.addr()
    }

    pub(super) async fn get(&mut self, addr: &str) -> Result<&mut Connection, ClientError> {
        if self.is_source(addr) {
            return Ok(&mut *self.source);
        }
        if !self.others.contains_key(addr) {
            let conn = Connection::connect(addr, self.options.clone()).await?;
            self.others.insert(addr.to_owned(), conn);
        }
        Ok(self.others.get_mut(addr).expect("connected above"))
    }

    /// After `e` at `addr`: `Err` when the source connection itself failed
    /// (the round ends), else what to report (a failed connection to
    /// another broker is dropped).
    pub(super) fn failed(&mut self, addr: &str, e: ClientError) -> Result<String, ClientError> {
        if connection_failed(&e) {
            if self.is_source(addr) {
                return Err(e);
            }
            self.others.remove(addr);
        }
        Ok(e.to_string())
    }
}

/// Each group's coordinator ("host:port") at the source, or why not.
pub(super) async fn find_coordinators(
    brokers: &mut SourceBrokers<'_>,
    groups: &[String],
) -> Result<BTreeMap<String, Result<String, String>>, ClientError> {
    let source_addr = brokers.source.addr().to_owned();
    if !brokers.source.advertises(ApiKey::FindCoordinator as i16) {
        return Ok(groups.iter().map(|g| (g.clone(), Ok(source_addr.clone()))).collect());
    }
    let (min, max) = FIND_COORDINATOR_VERSIONS;
    let version = match brokers.source.version_for::<FindCoordinatorRequest>(min, max) {
        Ok(v) => v,
        Err(e) => return Ok(groups.iter().map(|g| (g.clone(), Err(e.to_string()))).collect()),
    };
    let mut out = BTreeMap::new();
    let chunk = if version >= 4 { GROUPS_PER_REQUEST } else { 1 };
    for keys in groups.chunks(chunk) {
        let request = find_coordinator_request(version, keys);
        match brokers.source.request(&request, version).await {
            Ok(response) => out.extend(coordinators_from(version, keys, &response)),
            Err(e) => {
                let error = brokers.failed(&source_addr, e)?;
                out.extend(keys.iter().map(|k| (k.clone(), Err(error.clone()))));
            }
        }
    }
    Ok(out)
}

pub(super) fn find_coordinator_request(version: i16, keys: &[String]) -> FindCoordinatorRequest {
    let request = FindCoordinatorRequest::default();
    let request = if version >= 1 {
        request.with_key_type(KEY_TYPE_GROUP)
    } else {
        request
    };
    if version >= 4 {
        request.with_coordinator_keys(keys.iter().map(|k| s(k)).collect())
    } else {
        request.with_key(s(&keys[0]))
    }
}

pub(super) fn coordinators_from(
    version: i16,
    keys: &[String],
    response: &FindCoordinatorResponse,
) -> Vec<(String, Result<String, String>)> {
    let answer = |code: i16, host: &StrBytes, port: i32| {
        if code != codes::NONE {
            Err(format!("FindCoordinator error code {code}"))
        } else {
            Ok(format!("{host}:{port}"))
        }
    };
    if version < 4 {
        return vec![(
            keys[0].clone(),
            answer(response.error_code, &response.host, response.port),
        )];
    }
    keys.iter()
        .map(|key| {
            let found = response
                .coordinators
                .iter()
                .find(|c| c.key.as_str() == key.as_str())
                .map_or_else(
                    || Err("FindCoordinator did not answer for the group".to_owned()),
                    |c| answer(c.error_code, &c.host, c.port),
                );
            (key.clone(), found)
        })
        .collect()
}
