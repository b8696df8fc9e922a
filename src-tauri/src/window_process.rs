//! The window's process as the tray holds it while the window is open: what `state::Shell` keeps, and
//! the orders it takes. Below both the state and the window's code, so each can name it.

use keymux::desktop::window::Command;
use tokio::sync::{mpsc, oneshot};

/// The window's process, as the tray holds it while the window is open.
pub struct WindowProcess {
    pub(super) id: u64,
    pub(super) orders: mpsc::UnboundedSender<Order>,
}

pub(super) enum Order {
    Tell(Command),
    /// End it (its input closes, so it keeps its place and exits), then say so.
    Close(oneshot::Sender<()>),
}
