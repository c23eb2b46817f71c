use super::*;

fn request(id: &str, size: usize) -> Request {
    Request {
        request_id: RequestId::from(id),
        origin: ConnectionId(0),
        client_request_id: Some(json!(format!("c-{id}"))),
        text: format!("text of {id}"),
        attachments: Vec::new(),
        size,
        options: None,
        submitted_at: 1,
        started_at: None,
        trace_id: "t".into(),
        working_directory: None,
    }
}

fn started(start: Start) -> (Rc<Request>, u64, u64) {
    match start {
        Start::Started {
            request,
            turn,
            version,
        } => (request, turn, version),
        other => panic!("expected a start, got {other:?}"),
    }
}

fn running_id(queue: &RequestQueue) -> Option<String> {
    queue.running().map(|r| r.request.request_id.to_string())
}

fn waiting(queue: &RequestQueue) -> Vec<String> {
    queue
        .waiting_ids()
        .iter()
        .map(|id| id.to_string())
        .collect()
}

#[test]
fn requests_start_one_at_a_time_in_submit_order_and_an_interrupt_goes_first() {
    let mut q = RequestQueue::default();
    assert!(matches!(q.start_next(5), Start::Empty));
    for id in ["a", "b", "c"] {
        assert_eq!(
            q.enqueue(request(id, 1), false).then,
            AfterEnqueue::StartNext
        );
    }
    let (a, turn_a, _) = started(q.start_next(10));
    assert_eq!(a.request_id.to_string(), "a");
    assert_eq!(a.started_at, Some(10));
    assert!(matches!(q.start_next(11), Start::Busy));
    // An interrupt with a request running: it is queued first, and the running request
    // must be cancelled (which starts it).
    let interrupt = q.enqueue(request("i", 1), true);
    assert_eq!(interrupt.then, AfterEnqueue::InterruptRunning);
    assert_eq!(waiting(&q), ["i", "b", "c"]);
    let (cancelled, _) = q.take_running().expect("a runs");
    assert_eq!(cancelled.turn, turn_a);
    let (i, turn_i, _) = started(q.start_next(12));
    assert_eq!(i.request_id.to_string(), "i");
    assert!(turn_i > turn_a, "every start takes a new turn number");
    assert!(q.finish(turn_i).is_some());
    let (b, ..) = started(q.start_next(13));
    assert_eq!(b.request_id.to_string(), "b");
    // An interrupt on an idle queue simply starts.
    let mut idle = RequestQueue::default();
    assert_eq!(
        idle.enqueue(request("x", 1), true).then,
        AfterEnqueue::StartNext
    );
}

#[test]
fn every_change_has_a_new_version_and_a_stale_turn_changes_nothing() {
    let mut q = RequestQueue::default();
    let v1 = q.enqueue(request("a", 1), false).version;
    let (_, turn, v2) = started(q.start_next(1));
    assert!(v2 > v1);
    let before = q.snapshot();
    assert!(q.finish(turn + 1).is_none(), "another turn's end is stale");
    assert_eq!(q.snapshot(), before);
    assert!(q.finish(turn).is_some());
    let after = q.snapshot();
    assert!(after["version"].as_u64() > before["version"].as_u64());
    assert_eq!(after["running"], Value::Null);
    assert!(q.finish(turn).is_none(), "a turn ends once");
}

#[test]
fn room_is_bounded_by_depth_and_bytes_and_an_empty_queue_takes_anything() {
    let mut q = RequestQueue::default();
    assert_eq!(
        q.refusal(MAX_QUEUED_BYTES * 2),
        None,
        "an empty queue takes any size"
    );
    q.enqueue(request("big", MAX_QUEUED_BYTES - 10), false);
    let refusal = q.refusal(11).expect("past the byte bound");
    assert_eq!(refusal["error"], "queue_full");
    assert_eq!(refusal["maxBytes"], MAX_QUEUED_BYTES);
    assert_eq!(q.refusal(10), None, "exactly at the bound fits");
    // Starting the big one gives its bytes back.
    started(q.start_next(1));
    assert_eq!(q.refusal(MAX_QUEUED_BYTES), None);
    for i in 0..MAX_QUEUE_DEPTH {
        assert_eq!(q.refusal(1), None, "request {i} fits");
        q.enqueue(request(&format!("r{i}"), 1), false);
    }
    let refusal = q.refusal(1).expect("past the depth bound");
    assert_eq!(refusal["maxDepth"], MAX_QUEUE_DEPTH);
    assert!(refusal.get("maxBytes").is_none());
    // A cancelled request gives its place back.
    q.cancel_queued(&RequestId::from("r5")).expect("queued");
    assert_eq!(q.refusal(1), None);
}

#[test]
fn a_submit_supersedes_only_a_request_stalled_on_a_question() {
    let mut q = RequestQueue::default();
    assert!(!q.supersedes(false), "nothing runs");
    q.enqueue(request("a", 1), false);
    started(q.start_next(1));
    assert!(!q.supersedes(false), "running, not waiting on anyone");
    q.running_mut().unwrap().blocked_on = Some("question-1".into());
    assert!(q.supersedes(false));
    assert!(
        !q.supersedes(true),
        "an interrupt cancels with its own reason"
    );
    assert!(q.running_is_blocked());
}

#[test]
fn cancel_finds_a_request_wherever_it_is_and_remembers_a_bounded_number() {
    let mut q = RequestQueue::default();
    q.enqueue(request("a", 1), false);
    q.enqueue(request("b", 1), false);
    started(q.start_next(1));
    let id = RequestId::from;
    assert_eq!(q.locate(&id("a")), Location::Running);
    assert_eq!(q.locate(&id("b")), Location::Queued);
    assert_eq!(q.locate(&id("zzz")), Location::Unknown);
    let (b, _) = q.cancel_queued(&id("b")).expect("queued");
    assert_eq!(b.request_id, id("b"));
    assert!(q.cancel_queued(&id("b")).is_none(), "cancelled once");
    assert_eq!(q.locate(&id("b")), Location::Finished);
    q.take_running().expect("a runs");
    assert_eq!(q.locate(&id("a")), Location::Finished);
    assert!(q.take_running().is_none());
    // Finished ids are remembered up to FINISHED_MEMORY, oldest forgotten first.
    for i in 0..FINISHED_MEMORY {
        q.enqueue(request(&format!("f{i}"), 1), false);
        let (_, turn, _) = started(q.start_next(2));
        q.finish(turn).expect("current");
    }
    assert_eq!(q.locate(&id("b")), Location::Unknown);
    assert_eq!(q.locate(&id("a")), Location::Unknown);
    assert_eq!(q.locate(&id("f0")), Location::Finished);
    assert_eq!(q.finished.len(), FINISHED_MEMORY);
}

#[test]
fn client_ids_name_the_running_request_first() {
    let mut q = RequestQueue::default();
    let mut a = request("a", 1);
    a.client_request_id = Some(json!("same"));
    let mut b = request("b", 1);
    b.client_request_id = Some(json!("same"));
    q.enqueue(a, false);
    q.enqueue(b, false);
    assert_eq!(
        q.find_by_client_id(&json!("same")),
        Some(RequestId::from("a"))
    );
    started(q.start_next(1));
    assert_eq!(
        q.find_by_client_id(&json!("same")),
        Some(RequestId::from("a"))
    );
    q.take_running();
    assert_eq!(
        q.find_by_client_id(&json!("same")),
        Some(RequestId::from("b"))
    );
    assert_eq!(q.find_by_client_id(&json!("other")), None);
}

#[test]
fn promote_moves_a_waiting_request_first_and_first_is_no_change() {
    let mut q = RequestQueue::default();
    for id in ["a", "b", "c"] {
        q.enqueue(request(id, 1), false);
    }
    let version = q.snapshot()["version"].clone();
    assert_eq!(q.promote(&RequestId::from("a")), Promotion::AlreadyFirst);
    assert_eq!(q.snapshot()["version"], version, "no new version");
    assert_eq!(q.promote(&RequestId::from("c")), Promotion::Moved);
    assert_eq!(waiting(&q), ["c", "a", "b"]);
    assert_ne!(q.snapshot()["version"], version);
    started(q.start_next(1));
    assert_eq!(running_id(&q).as_deref(), Some("c"));
    assert_eq!(q.promote(&RequestId::from("c")), Promotion::NotQueued);
    assert_eq!(q.promote(&RequestId::from("nope")), Promotion::NotQueued);
}

#[test]
fn snapshots_coalesce_until_the_timer_fires_and_announce_blocked_changes() {
    let mut q = RequestQueue::default();
    assert!(q.snapshot_due(), "the first change arms the timer");
    assert!(!q.snapshot_due(), "later changes ride on it");
    q.enqueue(request("a", 1), false);
    started(q.start_next(1));
    let snapshot = q.snapshot_fired();
    assert_eq!(snapshot["running"]["state"], "running");
    assert_eq!(snapshot["running"]["startedAt"], 1);
    assert!(snapshot["running"].get("blockedOn").is_none());
    assert!(q.snapshot_due(), "fired: the next change arms it again");
    q.snapshot_fired();
    assert!(!q.blocked_change_unannounced());
    q.running_mut().unwrap().blocked_on = Some("q".into());
    assert!(q.blocked_change_unannounced(), "a question opened since");
    let snapshot = q.snapshot_fired();
    assert_eq!(snapshot["running"]["blockedOn"], "interaction");
    assert!(!q.blocked_change_unannounced());
    q.running_mut().unwrap().blocked_on = None;
    assert!(q.blocked_change_unannounced(), "answered since");
}

#[test]
fn a_submit_answers_running_for_the_request_it_started_even_if_finished() {
    let mut q = RequestQueue::default();
    let a = q.enqueue(request("a", 1), false);
    let (_, turn, _) = started(q.start_next(42));
    q.finish(turn);
    let answer = q.submit_answer(a.entry);
    assert_eq!(answer["ok"], true);
    assert_eq!(answer["entry"]["state"], "running");
    assert_eq!(answer["entry"]["startedAt"], 42);
    let b = q.enqueue(request("b", 1), false);
    q.enqueue(request("c", 1), true);
    let answer = q.submit_answer(b.entry);
    assert_eq!(answer["entry"]["state"], "queued");
    assert!(answer["entry"].get("startedAt").is_none());
    assert_eq!(answer["entry"]["clientRequestId"], "c-b");
}

#[test]
fn status_and_busy_follow_the_queue() {
    let mut q = RequestQueue::default();
    assert_eq!(q.status(), "idle");
    assert!(!q.is_busy());
    q.enqueue(request("a", 1), false);
    q.enqueue(request("b", 1), false);
    assert_eq!(q.status(), "2 queued");
    assert!(q.is_busy());
    let (_, turn, _) = started(q.start_next(1));
    assert_eq!(q.status(), "running, 1 queued");
    assert!(q.current(turn).is_some());
    assert!(q.current(turn + 1).is_none());
    assert!(q.next_turn() > turn, "a choice's turn is a new number");
}

#[test]
fn cancel_reasons_on_the_wire_are_typeagents() {
    use CancelReason::*;
    let wire: Vec<_> = [
        Cancelled,
        Interrupted,
        Superseded,
        NoClients,
        ServerStopping,
        ConversationClosed,
        StorageError,
    ]
    .iter()
    .map(|r| (r.as_str(), r.wire()))
    .collect();
    assert_eq!(
        wire,
        [
            ("cancelled", "user"),
            ("interrupted", "user"),
            ("superseded", "user"),
            ("no_clients", "no_clients"),
            ("server_stopping", "server_stopping"),
            ("conversation_closed", "server_stopping"),
            (STORAGE_ERROR, "server_stopping"),
        ]
    );
}
