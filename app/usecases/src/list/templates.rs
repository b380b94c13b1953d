//! The servers' templates as gateway templates, and every server's status.

use quarry_domain::{ServerStatus, template_to_gateway};
use quarry_ports::GatewayTemplate;

use crate::{ResourceService, upstream::Attempts};

impl ResourceService {
    /// `resources/templates/list`: every server's templates as gateway templates; a failing
    /// server contributes none.
    pub(crate) async fn templates(&self) -> Vec<GatewayTemplate> {
        let all = self.upstreams.all();
        let fetched = futures::future::join_all(all.iter().map(|u| async move {
            let attempts = Attempts {
                retries: 0,
                deadline: Some(u.settings.spec.timeout),
                total: Some(u.settings.spec.timeout),
            };
            u.call(
                attempts,
                |session| async move { session.list_templates().await },
            )
            .await
            .unwrap_or_default()
        }))
        .await;
        all.iter()
            .zip(fetched)
            .flat_map(|(u, templates)| {
                templates.into_iter().map(move |t| GatewayTemplate {
                    server: u.name().clone(),
                    uri_template: template_to_gateway(u.name(), &t.uri_template),
                    upstream_template: t.uri_template,
                    name: t.name,
                    description: t.description,
                    mime_type: t.mime_type,
                })
            })
            .collect()
    }

    /// Every server's status, listing each afresh to find out.
    pub(crate) async fn probe_servers(&self) -> Vec<ServerStatus> {
        self.sync_registry().await;
        let all = self.upstreams.all();
        futures::future::join_all(all.iter().map(|u| self.list_one(u, false))).await;
        all.iter().map(|u| u.status()).collect()
    }
}
