//! The window's process as the tray holds it while the window is open: what `state::Shell` keeps, and
//! the orders it takes. A room of its own below both the state and the window's code, so each can name
//! it without naming the other.

use keymux::desktop::window::Command;
use tokio::sync::{mpsc, oneshot};

/// The window's process, as the tray holds it while the window is open.
pub struct WindowProcess {
    pub(crate) id: u64,
    pub(crate) orders: mpsc::UnboundedSender<Order>,
}

pub(crate) enum Order {
    Tell(Command),
    /// End it (its input closes, so it keeps its place and exits), then say so.
    Close(oneshot::Sender<()>),
}
