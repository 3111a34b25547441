// The identity provider's id for a member (SCIM `externalId`; for Microsoft Entra the object id,
// which its OpenID Connect tokens carry as `oid`), kept per membership: one organization's IdP
// names its people, another organization's may name the same person differently. SCIM
// provisioning writes it; SSO sign-in reads it to link the IdP's subject to the member it
// provisioned, so the two converge on one identity and never on an email address alone.
import { type Kysely, sql } from 'kysely';

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('memberships').addColumn('external_id', 'text').execute();
  await db.schema
    .createIndex('memberships_external_id_key')
    .unique()
    .on('memberships')
    .columns(['org_id', 'external_id'])
    .where(sql.ref('external_id'), 'is not', null)
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('memberships_external_id_key').execute();
  await db.schema.alterTable('memberships').dropColumn('external_id').execute();
}
