import { startTestApp, type TestApp } from '../support/app';
import { startStripePeer, type StripePeer } from '../support/stripe-peer';
import { expectError } from '../support/client';

/*
 * Billing through Stripe's official SDK, pointed at a Stripe-shaped server on loopback
 * (test/support/stripe-peer.ts): checkout and portal sessions, the subscription read back
 * when billing is read (moving the plan, and with it the entitlements), the subscription
 * that blocks deleting an organization, and a deployment without a payment provider.
 */

const PRICES = { 'team:month': 'price_team_monthly', 'team:year': 'price_team_yearly' };

let stripe: StripePeer;
let t: TestApp;
beforeAll(async () => {
  stripe = await startStripePeer();
  t = await startTestApp({
    env: {
      STRIPE_SECRET_KEY: stripe.key,
      STRIPE_API_BASE_URL: stripe.url,
      STRIPE_PRICES: Object.entries(PRICES)
        .map(([k, v]) => `${k}=${v}`)
        .join(','),
    },
  });
});
afterAll(async () => {
  await t?.close();
  await stripe?.close();
});
afterEach(() => stripe.setDown(false));

async function setup() {
  const org = await t.factories.org({ name: 'Billed Inc.' });
  const client = t.as({ token: org.token, org: org.orgId });
  const path = (suffix = '') => `/organization/${org.orgId}/billing${suffix}`;
  return { org, client, path };
}

/** The Stripe customer the organization became. */
async function customerOf(orgId: string): Promise<string> {
  return (await t.db.selectFrom('organization_billing').select('customer_id').where('org_id', '=', orgId).executeTakeFirstOrThrow()).customer_id;
}

const callsTo = (path: string, customer?: string) =>
  stripe.calls.filter((c) => c.path === path && (!customer || c.form.customer === customer || c.query.customer === customer));

describe('getOrganizationBilling', () => {
  it('answers the free plan for an organization that never subscribed, counting billable seats only', async () => {
    const { org, client, path } = await setup();
    await t.factories.member(org.orgId, { roles: ['member'] });
    await t.factories.member(org.orgId, { roles: ['billing_admin'] });
    await t.factories.member(org.orgId, { roles: ['auditor', 'member'] });
    await t.factories.member(org.orgId, { roles: ['member'], status: 'suspended' });
    const before = stripe.calls.length;
    const res = await client.get(path());
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      organization_id: org.orgId,
      plan: 'free',
      status: 'none',
      billing_interval: null,
      billable_seats: 3,
      seat_limit: null,
      trial_ends_at: null,
      current_period_start: null,
      current_period_end: null,
      cancel_at_period_end: false,
      has_payment_method: false,
      billing_email: null,
      updated_at: null,
    });
    expect(stripe.calls.length).toBe(before);
    const billingAdmin = await t.factories.member(org.orgId, { roles: ['billing_admin'] });
    expect((await t.as({ token: await t.factories.token(org.orgId, billingAdmin), org: org.orgId }).get(path())).status).toBe(200);
  });
});

describe('createBillingCheckoutSession', () => {
  it('makes the organization a customer once and opens a checkout for the plan, interval and seats', async () => {
    const { org, client, path } = await setup();
    const res = await client.post(path('/checkout'), { plan: 'team', billing_interval: 'year', seats: 20, return_path: '/settings/billing?from=checkout' });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ url: expect.stringMatching(/^https:\/\/checkout\.stripe\.com\/c\/pay\/cs_test_/), expires_at: expect.any(String) });
    const customer = await customerOf(org.orgId);
    const [created] = stripe.calls.filter((c) => c.path === '/v1/customers' && c.form['metadata[organization_id]'] === org.orgId);
    expect(created).toMatchObject({ method: 'POST', form: { name: 'Billed Inc.' }, idempotencyKey: `customer-${org.orgId}` });
    const [checkout] = callsTo('/v1/checkout/sessions', customer);
    expect(checkout?.form).toMatchObject({
      mode: 'subscription',
      customer,
      client_reference_id: org.orgId,
      'line_items[0][price]': PRICES['team:year'],
      'line_items[0][quantity]': '20',
      success_url: `${t.url}/settings/billing?from=checkout`,
      cancel_url: `${t.url}/settings/billing?from=checkout`,
      'subscription_data[metadata][organization_id]': org.orgId,
      'subscription_data[metadata][plan]': 'team',
    });
    expect(JSON.stringify(stripe.calls)).not.toContain(stripe.key);
    const [entry] = await t.factories.auditEntries(org.orgId, 'billing.checkout_started');
    expect(entry).toMatchObject({
      actor_type: 'api_token',
      target_type: 'billing',
      target_id: org.orgId,
      changes: { plan: 'team', billing_interval: 'year', seats: 20 },
    });

    // A second checkout reuses the customer; seats default to those in use, monthly.
    expect((await client.post(path('/checkout'), { plan: 'team' })).status).toBe(200);
    expect(stripe.calls.filter((c) => c.path === '/v1/customers' && c.form['metadata[organization_id]'] === org.orgId)).toHaveLength(1);
    expect(callsTo('/v1/checkout/sessions', customer)[1]?.form).toMatchObject({ 'line_items[0][price]': PRICES['team:month'], 'line_items[0][quantity]': '1' });
    // Until the payment is completed, nothing changes.
    expect((await client.get(path())).body).toMatchObject({ plan: 'free', status: 'none' });
  });

  it('refuses a plan the deployment does not sell and fewer seats than are in use', async () => {
    const { org, client, path } = await setup();
    await t.factories.member(org.orgId);
    for (const [body, pointer] of [
      [{ plan: 'enterprise' }, '/plan'],
      [{ plan: 'team', seats: 1 }, '/seats'],
    ] as const) {
      const res = await client.post(path('/checkout'), body);
      expectError(res, 400, 'validation_failed');
      expect(res.body.errors).toEqual([{ in: 'body', pointer, message: expect.any(String) }]);
    }
    for (const body of [
      {},
      { plan: 'Team!' },
      { plan: 'team', seats: 0 },
      { plan: 'team', billing_interval: 'week' },
      { plan: 'team', return_path: 'https://evil.example/' },
      { plan: 'team', return_path: '//evil.example' },
      { plan: 'team', extra: 1 },
    ]) {
      expectError(await client.post(path('/checkout'), body), 400, 'validation_failed');
    }
    expect(await t.factories.auditEntries(org.orgId, 'billing.checkout_started')).toEqual([]);
  });
});

describe('a subscription read back from the provider', () => {
  it('moves the plan and the entitlements, blocks a second checkout and the organization’s deletion until cancelled', async () => {
    const { org, client, path } = await setup();
    const portal = await client.post(path('/portal'), { return_path: '/settings/billing' });
    expect(portal.status).toBe(200);
    const customer = await customerOf(org.orgId);
    const periodStart = Math.floor(Date.UTC(2026, 10, 1) / 1000);
    stripe.setSubscriptions(customer, [
      { status: 'active', price: PRICES['team:year'], interval: 'year', quantity: 20, periodStart, periodEnd: periodStart + 365 * 86_400 },
    ]);
    stripe.setEmail(customer, 'billing@billed.example');

    const billing = await client.get(path());
    expect(billing.body).toEqual({
      organization_id: org.orgId,
      plan: 'team',
      status: 'active',
      billing_interval: 'year',
      billable_seats: 1,
      seat_limit: 20,
      trial_ends_at: null,
      current_period_start: '2026-11-01T00:00:00.000Z',
      current_period_end: new Date((periodStart + 365 * 86_400) * 1000).toISOString(),
      cancel_at_period_end: false,
      has_payment_method: true,
      billing_email: 'billing@billed.example',
      updated_at: expect.any(String),
    });
    expect((await client.get(`/organization/${org.orgId}`)).body.plan).toBe('team');
    const entitlements = await client.get('/entitlement');
    expect(entitlements.body).toMatchObject({ plan: 'team', audit_log_retention_days: 365, limits: { custom_connectors: { limit: 100, used: 0 } } });

    expectError(await client.post(path('/checkout'), { plan: 'team' }), 409, 'subscription_active');
    const slug = (await client.get(`/organization/${org.orgId}`)).body.slug;
    const session = await t.factories.session(org.ownerId);
    expectError(await t.as({ session, org: org.orgId }).delete(`/organization/${org.orgId}?confirm=${slug}`), 409, 'subscription_active');

    // A payment being retried keeps the plan; retries exhausted or a cancellation end it.
    stripe.setSubscriptions(customer, [{ status: 'past_due', price: PRICES['team:year'], interval: 'year', quantity: 20 }]);
    expect((await client.get(path())).body).toMatchObject({ plan: 'team', status: 'past_due' });
    stripe.setSubscriptions(customer, [{ status: 'unpaid', price: PRICES['team:year'], interval: 'year', quantity: 20 }]);
    expect((await client.get(path())).body).toMatchObject({ plan: 'free', status: 'unpaid' });
    stripe.setSubscriptions(customer, [{ status: 'trialing', price: PRICES['team:month'], trialEnd: Math.floor(Date.now() / 1000) + 86_400 * 14 }]);
    expect((await client.get(path())).body).toMatchObject({ plan: 'team', status: 'trialing', billing_interval: 'month', trial_ends_at: expect.any(String) });
    stripe.setSubscriptions(customer, [{ status: 'canceled', price: PRICES['team:month'] }]);
    expect((await client.get(path())).body).toMatchObject({ plan: 'free', status: 'canceled' });
    expect((await client.get('/entitlement')).body.plan).toBe('free');

    expect((await t.as({ session, org: org.orgId }).delete(`/organization/${org.orgId}?confirm=${slug}`)).status).toBe(204);
  });

  it('answers the state last read while the provider is down; actions that need it answer 503', async () => {
    const { org, client, path } = await setup();
    await client.post(path('/portal'));
    const customer = await customerOf(org.orgId);
    stripe.setSubscriptions(customer, [{ status: 'active', price: PRICES['team:month'], quantity: 3 }]);
    expect((await client.get(path())).body).toMatchObject({ plan: 'team', status: 'active', seat_limit: 3 });
    stripe.setDown(true);
    expect((await client.get(path())).body).toMatchObject({ plan: 'team', status: 'active', seat_limit: 3 });
    const refused = await client.post(path('/portal'), {});
    expectError(refused, 503, 'payment_provider_unavailable');
    expect(refused.headers.get('retry-after')).toMatch(/^\d+$/);
    const slug = (await client.get(`/organization/${org.orgId}`)).body.slug;
    const session = await t.factories.session(org.ownerId);
    expectError(await t.as({ session, org: org.orgId }).delete(`/organization/${org.orgId}?confirm=${slug}`), 503, 'payment_provider_unavailable');
    expect((await client.get(`/organization/${org.orgId}`)).status).toBe(200);
  });
});

describe('the seats the subscription pays for', () => {
  it('caps the seat limit while the subscription is in force: the tighter of it and the plan’s holds', async () => {
    const { org, client, path } = await setup();
    await client.post(path('/portal'));
    const customer = await customerOf(org.orgId);
    await t.factories.member(org.orgId, { roles: ['member'] });
    // Two seats taken (the owner and a member); the team plan allows 1000, the subscription pays for 2.
    stripe.setSubscriptions(customer, [{ status: 'active', price: PRICES['team:month'], quantity: 2 }]);
    expect((await client.get(path())).body).toMatchObject({ plan: 'team', billable_seats: 2, seat_limit: 2 });
    expect((await client.op('getEntitlements')).body.limits.seats).toEqual({ limit: 2, used: 2 });
    const auditor = await t.factories.member(org.orgId, { roles: ['auditor'] });
    const full = await client.op('updateMember', { params: { userId: auditor }, body: { role_ids: [org.roleIds.member] } });
    expectError(full, 403, 'entitlement_exceeded');
    expect(full.error?.detail).toContain('pays for 2 seats');
    // Seats added in the portal, read back: one more fits.
    stripe.setSubscriptions(customer, [{ status: 'active', price: PRICES['team:month'], quantity: 3 }]);
    expect((await client.get(path())).body.seat_limit).toBe(3);
    expect((await client.op('updateMember', { params: { userId: auditor }, body: { role_ids: [org.roleIds.member] } })).status).toBe(200);
    // A subscription no longer in force caps nothing: the free plan’s limit holds.
    stripe.setSubscriptions(customer, [{ status: 'canceled', price: PRICES['team:month'], quantity: 3 }]);
    expect((await client.get(path())).body).toMatchObject({ plan: 'free', seat_limit: 3 });
    expect((await client.op('getEntitlements')).body.limits.seats).toEqual({ limit: 1000, used: 3 });
  });
});

describe('a change read back from the provider is audited', () => {
  it('records billing.updated by the system with what moved (plan, status, seats); nothing moved, no entry', async () => {
    const { org, client, path } = await setup();
    await client.post(path('/portal'));
    const customer = await customerOf(org.orgId);
    stripe.setSubscriptions(customer, [{ status: 'active', price: PRICES['team:year'], interval: 'year', quantity: 20 }]);
    expect((await client.get(path())).body.plan).toBe('team');
    const [first, ...more] = await t.factories.auditEntries(org.orgId, 'billing.updated');
    expect(more).toEqual([]);
    expect(first).toMatchObject({ actor_type: 'system', actor_id: null, actor_user_id: null, target_type: 'billing', target_id: org.orgId });
    expect(first!.changes).toMatchObject({
      plan: { from: 'free', to: 'team' },
      status: { from: 'none', to: 'active' },
      billing_interval: { from: null, to: 'year' },
      seat_limit: { from: null, to: 20 },
    });
    // Read again, nothing changed: no entry.
    await client.get(path());
    expect(await t.factories.auditEntries(org.orgId, 'billing.updated')).toHaveLength(1);
    // Seats changed in the portal: one entry, naming them and not the plan, which stays.
    stripe.setSubscriptions(customer, [{ status: 'active', price: PRICES['team:year'], interval: 'year', quantity: 25 }]);
    await client.get(path());
    const entries = await t.factories.auditEntries(org.orgId, 'billing.updated');
    expect(entries).toHaveLength(2);
    expect(entries[1]!.changes.seat_limit).toEqual({ from: 20, to: 25 });
    expect(entries[1]!.changes).not.toHaveProperty('plan');
    expect(entries[1]!.changes).not.toHaveProperty('status');
    // Cancelled: back to the free plan, audited as such.
    stripe.setSubscriptions(customer, [{ status: 'canceled', price: PRICES['team:year'], interval: 'year', quantity: 25 }]);
    await client.get(path());
    expect((await t.factories.auditEntries(org.orgId, 'billing.updated')).at(-1)!.changes).toMatchObject({
      plan: { from: 'team', to: 'free' },
      status: { from: 'active', to: 'canceled' },
    });
  });
});

describe('createBillingPortalSession', () => {
  it('opens the customer portal, with or without a body, back to a path of the web app', async () => {
    const { org, client, path } = await setup();
    const res = await client.post(path('/portal'), { return_path: '/settings/billing' });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ url: expect.stringMatching(/^https:\/\/billing\.stripe\.com\/p\/session\//), expires_at: null });
    const customer = await customerOf(org.orgId);
    expect(callsTo('/v1/billing_portal/sessions', customer)[0]?.form).toEqual({ customer, return_url: `${t.url}/settings/billing` });
    expect((await t.call('POST', path('/portal'), undefined, { token: org.token, org: org.orgId })).status).toBe(200);
    expect(callsTo('/v1/billing_portal/sessions', customer)).toHaveLength(2);
    const entries = await t.factories.auditEntries(org.orgId, 'billing.portal_opened');
    expect(entries).toHaveLength(2);
    expect(entries[0]).toMatchObject({ target_type: 'billing', target_id: org.orgId });
    expectError(await client.post(path('/portal'), { return_path: 'https://elsewhere.example' }), 400, 'validation_failed');
  });

  it('is refused without billing:manage (an Admin has everything but billing)', async () => {
    const { org, path } = await setup();
    const admin = await t.factories.member(org.orgId, { roles: ['admin'] });
    const byAdmin = t.as({ token: await t.factories.token(org.orgId, admin), org: org.orgId });
    expectError(await byAdmin.post(path('/portal'), {}), 403, 'missing_permission');
    expect((await byAdmin.get(path())).status).toBe(200);
  });
});

describe('a deployment without a payment provider', () => {
  let bare: TestApp;
  beforeAll(async () => {
    bare = await startTestApp();
  });
  afterAll(() => bare.close());

  it('answers billing as the free plan, and 503 payment_provider_unavailable for checkout and portal', async () => {
    const org = await bare.factories.org();
    const client = bare.as({ token: org.token, org: org.orgId });
    expect((await client.get(`/organization/${org.orgId}/billing`)).body).toMatchObject({ plan: 'free', status: 'none' });
    for (const [suffix, body] of [
      ['/checkout', { plan: 'team' }],
      ['/portal', {}],
    ] as const) {
      const res = await client.post(`/organization/${org.orgId}/billing${suffix}`, body);
      expectError(res, 503, 'payment_provider_unavailable');
      expect(res.body.detail).toContain('STRIPE_SECRET_KEY');
      expect(res.headers.get('retry-after')).toBe('3600');
    }
    expect((await client.get('/entitlement')).body.plan).toBe('free');
    const slug = (await client.get(`/organization/${org.orgId}`)).body.slug;
    const session = await bare.factories.session(org.ownerId);
    expect((await bare.as({ session, org: org.orgId }).delete(`/organization/${org.orgId}?confirm=${slug}`)).status).toBe(204);
  });
});
