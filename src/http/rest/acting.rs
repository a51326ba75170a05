//! The REST side of conversations shared with the caller: the summary of one under the alias
//! they know it by, with its owner and their role.

use super::sessions::{SessionSummary, summary};
use crate::http::ApiError;
use crate::http::AppState;
use crate::http::auth::Principal;
use crate::session::Acting;

/// The summary of the conversation `acting` names, as its caller sees it: under the alias
/// they know it by, with its owner and their role, when it is shared with them.
pub(crate) async fn acting_summary(
    app: &AppState,
    acting: &Acting,
) -> Result<SessionSummary, ApiError> {
    let record = app.manager.get(&acting.principal, &acting.agent_id).await?;
    let mut summary = summary(app, &acting.principal, record).await;
    if let Some((alias, role)) = &acting.shared {
        summary.agent_id = alias.clone();
        summary.owner = Some(acting.principal.to_string());
        summary.role = Some(*role);
    }
    Ok(summary)
}

/// The conversations other principals shared with `principal`, oldest share first, each under
/// its alias with its owner and their role.
pub(crate) async fn shared_summaries(
    app: &AppState,
    principal: &Principal,
) -> Result<Vec<SessionSummary>, ApiError> {
    let mut sessions = Vec::new();
    for share in app.manager.shared_with(principal).await? {
        let acting = Acting {
            principal: share.owner,
            agent_id: share.agent_id,
            shared: Some((share.alias, share.role)),
        };
        // One deleted meanwhile is left out.
        if let Ok(summary) = acting_summary(app, &acting).await {
            sessions.push(summary);
        }
    }
    Ok(sessions)
}
