//! Where the answer to a turn's question goes (a choice, a pick-and-remember, a form), and the
//! range check every choice answer passes. Plain data, shared by `interactions.rs` (questions
//! to everyone) and `choices.rs` (private choices).

use tokio::sync::oneshot;

use crate::agent::questions::{Picked, QuestionFormResponse};

/// Where a turn's question gets its answer (a choice index, or why there is none).
pub(super) type AnswerSender = oneshot::Sender<Result<usize, String>>;
/// Where a pick-and-remember gets its answer.
pub(super) type PickedSender = oneshot::Sender<Result<Picked, String>>;
/// Where a form gets its answers.
pub(super) type FormSender = oneshot::Sender<Result<QuestionFormResponse, String>>;

/// An index among `choices` options, or why not.
pub(super) fn in_range(index: usize, choices: usize) -> Result<usize, String> {
    if index < choices {
        Ok(index)
    } else {
        Err(format!(
            "expected a choice from 0 to {}, got {index}",
            choices.saturating_sub(1)
        ))
    }
}
