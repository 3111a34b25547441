// Rotating the key that seals secrets at rest: the new key goes first in ENCRYPTION_KEYS, the
// old one after it; `cli secrets reseal` (resealSecrets) moves every sealed column the areas
// declare to the new key, after which the old key can go.
import { randomBytes } from 'node:crypto';
import { serviceRegistry } from '../../src/modules';
import { SecretBox, secretBoxOf } from '../../src/lib/crypto';
import { resealSecrets } from '../../src/operator';
import { startTestApp, type TestApp } from '../support/app';

const oldKey = randomBytes(32);
let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ env: { ENCRYPTION_KEY: oldKey.toString('hex') } });
});
afterAll(() => t.close());

it('re-seals every stored secret with the current key, once, and the old key is no longer needed', async () => {
  const { orgId, token } = await t.factories.org();
  const url = `${t.url}/services/T1/B1/${randomBytes(8).toString('hex')}`;
  const created = await t
    .as({ token, org: orgId })
    .post('/notification-destination', { name: 'Rotated', type: 'slack', config: { webhook_url: url }, event_types: ['role.created'] });
  expect(created.status).toBe(201);
  const stored = async () =>
    (await t.db.selectFrom('notification_destinations').select('webhook_url_enc').where('id', '=', created.body.id).executeTakeFirstOrThrow())
      .webhook_url_enc as string;
  const context = `notification_destinations.webhook_url:${created.body.id}`;

  const newKey = randomBytes(32);
  const rotating = secretBoxOf({ current: newKey, older: [oldKey] });
  expect(serviceRegistry().sealed).toEqual(
    expect.arrayContaining([expect.objectContaining({ table: 'notification_destinations', column: 'webhook_url_enc' })]),
  );
  const first = await resealSecrets(t.db, rotating, serviceRegistry().sealed);
  expect(first).toEqual({ resealed: 1, current: 0, unreadable: [] });
  expect(SecretBox.keyIdOf(await stored())).toBe(rotating.currentKeyId);
  expect(await resealSecrets(t.db, rotating, serviceRegistry().sealed)).toEqual({ resealed: 0, current: 1, unreadable: [] });

  expect(secretBoxOf({ current: newKey, older: [] }).open(await stored(), context)).toBe(url);
  // A box without the key that sealed a value reports it rather than guessing.
  const lost = await resealSecrets(t.db, secretBoxOf({ current: randomBytes(32), older: [] }), serviceRegistry().sealed);
  expect(lost.unreadable).toEqual([`notification_destinations.webhook_url_enc#${created.body.id}`]);
});
