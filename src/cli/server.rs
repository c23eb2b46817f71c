//! `roundtable server status | stop`: probe a server, or ask it to shut down and wait for its
//! socket to close.

use std::time::Duration;

use super::{CliError, CliResult};
use crate::client::{ClientError, Connection, Endpoint, Event};

/// `roundtable server status`: is a server answering at `server`? (One that refuses the token
/// is running: its refusal is the answer.)
pub async fn server_status(server: &Endpoint) -> CliResult {
    let url = server.shown();
    match tokio::time::timeout(Duration::from_secs(2), Connection::connect_to(server)).await {
        Ok(Err(e @ ClientError::Unauthorized { .. })) => Err(e.into()),
        Ok(Ok(conn)) => {
            let count = conn
                .list_conversations(None)
                .await
                .map(|l| l.len())
                .unwrap_or(0);
            println!("running at {url} ({count} conversations)");
            conn.close();
            Ok(())
        }
        _ => Err(CliError::new(format!(
            "not running at {url}; start it with `roundtable serve`"
        ))),
    }
}

/// `roundtable server stop`: sends `shutdown` and waits for the socket to close.
pub async fn server_stop(server: &Endpoint) -> CliResult {
    let url = server.shown();
    let conn = Connection::connect_to(server).await?;
    let mut events = conn.take_events().expect("fresh connection");
    conn.shutdown_server().await?;
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(e) = events.recv().await {
            if matches!(e, Event::Closed { .. }) {
                return;
            }
        }
    })
    .await;
    match closed {
        Ok(()) => {
            println!("stopped the server at {url}");
            Ok(())
        }
        Err(_) => Err(CliError::new(
            "the server did not close the connection within 10 s",
        )),
    }
}
