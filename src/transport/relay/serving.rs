//! A's side of relays: answers `rt.node.<A>.relay.open` and runs one virtual connection per
//! cross-node join, an ordinary `Connection` fed from NATS whose outbox is read by the
//! relay's link (`link_out.rs`: one per node B and conversation), which publishes it.
//!
//! Nothing reaches a virtual connection without the cluster's seal
//! (`roundtable_actors::cluster::seal`): an open request must be stamped by a node holding the
//! cluster secret, for this subject and its reply subject, fresh and never seen before (else
//! it gets no answer and nothing is created), and each of the relay's frames must be the
//! next of its sealed stream (else it is dropped before the connection reads it).

use std::sync::Arc;

use actix::prelude::*;
use actix_http::ws::{Message, ProtocolError};
use bytes::Bytes;
use futures_util::StreamExt;
use roundtable_actors::cluster::seal::StreamOpener;
use roundtable_actors::cluster::Cluster;
use roundtable_actors::outbox::outbox;
use tokio::sync::oneshot;

use super::link_out::Attach;
use super::wire::{Chunks, OpenRelay, END, PONG, TEXT};
use crate::transport::AppState;
use crate::transport::Connection;

/// A's side: answers `rt.node.<A>.relay.open` for the server's life, starting one virtual
/// connection per request.
pub async fn serve_relays(state: Arc<AppState>, cluster: Cluster) {
    let client = cluster.client().clone();
    let me = cluster.node().to_string();
    let mut requests = match client.subscribe(cluster.names().relay_open(&me)).await {
        Ok(s) => s,
        Err(e) => {
            log::error!("cluster node {me}: cannot serve relays: {e}");
            return;
        }
    };
    let subject = cluster.names().relay_open(&me);
    while let Some(request) = requests.next().await {
        let Some(reply) = request.reply.clone() else {
            continue;
        };
        let Some(body) =
            cluster.open_stamped("a relay open", &subject, Some(&reply), &request.payload)
        else {
            continue; // no answer: an unauthenticated asker learns nothing
        };
        let answer = match serde_json::from_slice::<OpenRelay>(body) {
            Ok(open)
                if uuid::Uuid::parse_str(&open.relay).is_ok()
                    && uuid::Uuid::parse_str(&open.link).is_ok()
                    && roundtable_actors::cluster::ClusterSettings::validate_node_name(
                        &open.from,
                    )
                    .is_ok() =>
            {
                match open_virtual(&state, &cluster, &open).await {
                    Ok(()) => Bytes::from_static(b"ok"),
                    Err(e) => Bytes::from(e),
                }
            }
            _ => Bytes::from_static(b"malformed relay request"),
        };
        let sealed = cluster.seal_stamped(&reply, None, &answer);
        let _ = client.publish(reply, sealed).await;
    }
}

/// Starts the virtual connection of one relay.
async fn open_virtual(
    state: &Arc<AppState>,
    cluster: &Cluster,
    open: &OpenRelay,
) -> Result<(), String> {
    let client = cluster.client().clone();
    let subject = cluster.names().relay_in(cluster.node(), &open.relay);
    let inbound = client
        .subscribe(subject.clone())
        .await
        .map_err(|e| format!("subscribe: {e}"))?;
    let (tx, rx) = outbox(state.config.outbox.clone());
    let (done_tx, done_rx) = oneshot::channel::<()>();
    state.relay_links.out.attach(
        cluster,
        &open.from,
        &open.link,
        Attach {
            slot: open.slot,
            outbox: rx,
            done: done_tx,
        },
    )?;
    let mut chunks = Chunks::default();
    let mut opener = StreamOpener::default();
    let sealed_by = cluster.clone();
    let frames = inbound
        .take_until(done_rx)
        .filter_map(move |message| {
            let frame = sealed_by
                .open_stream(&mut opener, &subject, &message.payload)
                .and_then(|payload| chunks.take(payload))
                .and_then(|(kind, body)| match kind {
                    TEXT => String::from_utf8(body)
                        .ok()
                        .map(|text| Ok(Message::Text(text.into()))),
                    PONG => Some(Ok(Message::Pong(Bytes::new()))),
                    END => Some(Ok(Message::Close(None))),
                    _ => None,
                });
            std::future::ready(frame)
        })
        .map(|frame: Result<Message, ProtocolError>| frame);
    let connection = Connection::new(state.clone(), tx, false, true);
    log::info!(
        "cluster: virtual connection for node {} (relay {}, link {} slot {})",
        open.from,
        open.relay,
        open.link,
        open.slot
    );
    Connection::create(move |ctx| {
        ctx.add_stream(frames);
        connection
    });
    Ok(())
}
