import Stripe from 'stripe';
import type { components } from '../../../generated/openapi';
import { DEFAULT_PLAN, SUBSCRIPTION_IN_FORCE } from '../../access/entitlements';
import type { Config } from '../../config';
import type { Executor } from '../../db/database';
import { changedMembers, type RequestContext } from '../../http/context';
import { ApiError, validationError } from '../../http/errors';
import { seatsInUse } from '../../access/seats';
import { findOrganization } from './organizations.repo';

/*
 * Billing through Stripe's official SDK. The organization becomes a Stripe customer the first
 * time someone opens checkout or the portal; its subscription is read back from Stripe when
 * billing is read (and before a checkout or a deletion), and kept in organization_billing,
 * with the plan it pays for written to organizations.plan, where entitlements read it. The
 * spec has no webhook operation, so nothing arrives on its own.
 */

type Billing = components['schemas']['OrganizationBilling'];
type BillingStatus = components['schemas']['OrganizationBillingStatus'];
type BillingSession = components['schemas']['OrganizationBillingSession'];
type CheckoutCreate = components['schemas']['OrganizationBillingCheckoutCreate'];
type PortalCreate = components['schemas']['OrganizationBillingPortalCreate'];

/** Statuses under which the paid plan is in force (features stay on while a payment is retried). */
const IN_FORCE: ReadonlySet<BillingStatus> = new Set(SUBSCRIPTION_IN_FORCE);

/** The audit action of a change read from the payment provider (a subscription started, changed or ended there). */
const BILLING_READ_AUDIT = 'billing.updated';

const clients = new WeakMap<Config['stripe'], Stripe>();

/** The Stripe client of this deployment, or null when no key is configured. */
export function stripeOf(config: Config): Stripe | null {
  const settings = config.stripe;
  if (!settings.secretKey) return null;
  let client = clients.get(settings);
  if (!client) {
    const options: Stripe.StripeConfig = { maxNetworkRetries: 1, timeout: config.outbound.timeoutMs, telemetry: false, appInfo: { name: 'mcp-control-plane' } };
    if (settings.apiBaseUrl) {
      const url = new URL(settings.apiBaseUrl);
      options.protocol = url.protocol === 'http:' ? 'http' : 'https';
      options.host = url.hostname;
      options.port = url.port || (url.protocol === 'http:' ? 80 : 443);
    }
    client = new Stripe(settings.secretKey, options);
    clients.set(settings, client);
  }
  return client;
}

const notConfigured = () =>
  new ApiError(
    'payment_provider_unavailable',
    'This deployment has no payment provider configured (STRIPE_SECRET_KEY); every organization is on the free plan.',
    {
      headers: { 'Retry-After': '3600' },
    },
  );

const unavailable = () =>
  new ApiError('payment_provider_unavailable', 'The payment provider did not answer; retry shortly.', { headers: { 'Retry-After': '30' } });

function requireStripe(ctx: RequestContext): Stripe {
  const stripe = stripeOf(ctx.deps.config);
  if (!stripe) throw notConfigured();
  return stripe;
}

/** A call to Stripe: its failures (network, Stripe's own errors) become 503, logged without the key. */
async function callStripe<T>(ctx: RequestContext, what: string, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    const e = err as { type?: string; code?: string; statusCode?: number; message?: string };
    ctx.log.warn({ stripe: { what, type: e.type, code: e.code, status: e.statusCode } }, 'payment provider call failed');
    throw unavailable();
  }
}

const seconds = (value: number | null | undefined): Date | null => (typeof value === 'number' ? new Date(value * 1000) : null);

function findBilling(db: Executor, orgId: string) {
  return db.selectFrom('organization_billing').selectAll().where('org_id', '=', orgId).executeTakeFirst();
}

/** The plan and interval a Stripe price is sold as, by the deployment's STRIPE_PRICES. */
function planOfPrice(config: Config, priceId: string | undefined): { plan: string; interval: 'month' | 'year' } | null {
  for (const [key, id] of Object.entries(config.stripe.prices)) {
    if (id === priceId) {
      const [plan, interval] = key.split(':') as [string, 'month' | 'year'];
      return { plan, interval };
    }
  }
  return null;
}

function statusOf(subscription: Stripe.Subscription | undefined): BillingStatus {
  switch (subscription?.status) {
    case 'trialing':
    case 'active':
    case 'past_due':
    case 'unpaid':
    case 'canceled':
      return subscription.status as BillingStatus;
    case 'incomplete_expired':
      return 'canceled';
    case 'paused':
      return 'unpaid';
    default:
      return 'none'; // no subscription, or one whose first payment is not made yet
  }
}

/** The subscription that decides the plan: one in force if any, else the newest. */
function currentSubscription(subscriptions: Stripe.Subscription[]): Stripe.Subscription | undefined {
  return subscriptions.find((s) => IN_FORCE.has(statusOf(s))) ?? [...subscriptions].sort((a, b) => b.created - a.created)[0];
}

/**
 * Reads the organization's subscription from Stripe and keeps it: the billing row, and the
 * plan in force (the free plan unless a subscription is in force). Returns false when the
 * organization is not a customer yet. Throws 503 when Stripe does not answer.
 */
export async function syncFromProvider(ctx: RequestContext, orgId: string): Promise<boolean> {
  const stripe = stripeOf(ctx.deps.config);
  const row = await findBilling(ctx.db, orgId);
  if (!stripe || !row) return false;
  const [subscriptions, customer] = await Promise.all([
    callStripe(ctx, 'subscriptions.list', () => stripe.subscriptions.list({ customer: row.customer_id, status: 'all', limit: 10 })),
    callStripe(ctx, 'customers.retrieve', () => stripe.customers.retrieve(row.customer_id)),
  ]);
  const subscription = currentSubscription(subscriptions.data);
  const status = statusOf(subscription);
  const item = subscription?.items.data[0];
  const sold = planOfPrice(ctx.deps.config, item?.price.id);
  const plan = IN_FORCE.has(status) ? (sold?.plan ?? subscription?.metadata?.plan ?? DEFAULT_PLAN) : DEFAULT_PLAN;
  const live = customer.deleted ? null : customer;
  const interval: string | undefined = item?.price.recurring?.interval;
  const values = {
    subscription_id: subscription?.id ?? null,
    status,
    billing_interval: interval === 'month' || interval === 'year' ? (interval as 'month' | 'year') : null,
    seat_limit: item?.quantity ?? null,
    trial_ends_at: status === 'trialing' ? seconds(subscription?.trial_end) : null,
    current_period_start: seconds(item?.current_period_start),
    current_period_end: seconds(item?.current_period_end),
    cancel_at_period_end: subscription?.cancel_at_period_end ?? false,
    has_payment_method: Boolean(subscription?.default_payment_method ?? live?.invoice_settings?.default_payment_method),
    billing_email: live?.email ?? null,
  };
  // What the provider reports changes what the organization may do (its plan, the seats it
  // pays for): the change is the system's, recorded like any other, with what moved.
  await ctx.systemWrite(async (w) => {
    const current = await w.db.selectFrom('organization_billing').selectAll().where('org_id', '=', orgId).forUpdate().executeTakeFirst();
    if (!current) return;
    const org = await w.db.selectFrom('organizations').select('plan').where('id', '=', orgId).executeTakeFirst();
    const kept = (from: typeof values) =>
      Object.fromEntries(
        (Object.keys(values) as (keyof typeof values)[]).map((key) => [key, from[key] instanceof Date ? (from[key] as Date).toISOString() : from[key]]),
      );
    const billingChanges = changedMembers(kept(current), kept(values));
    const planChange = changedMembers({ plan: org?.plan ?? DEFAULT_PLAN }, { plan });
    if (Object.keys(billingChanges).length > 0)
      await w.db
        .updateTable('organization_billing')
        .set({ ...values, reported_at: new Date(), updated_at: new Date() })
        .where('org_id', '=', orgId)
        .execute();
    if (org && org.plan !== plan) await w.db.updateTable('organizations').set({ plan }).where('id', '=', orgId).execute();
    const changes = { ...planChange, ...billingChanges };
    if (Object.keys(changes).length > 0) w.audit({ targetId: orgId, changes });
  }, BILLING_READ_AUDIT);
  return true;
}

/** Whether a paid subscription is in force, read from Stripe when the organization is its customer. */
export async function subscriptionInForce(ctx: RequestContext, orgId: string): Promise<boolean> {
  await syncFromProvider(ctx, orgId);
  const row = await findBilling(ctx.db, orgId);
  return row !== undefined && IN_FORCE.has(row.status);
}

export async function getBilling(ctx: RequestContext, orgId: string): Promise<Billing> {
  try {
    await syncFromProvider(ctx, orgId);
  } catch (err) {
    // The state last read still answers; the next read asks again.
    if (!(err instanceof ApiError)) throw err;
  }
  const [org, row, seats] = await Promise.all([findOrganization(ctx.db, orgId), findBilling(ctx.db, orgId), seatsInUse(ctx.db, orgId, { invites: false })]);
  return {
    organization_id: orgId,
    plan: org?.plan ?? DEFAULT_PLAN,
    status: row?.status ?? 'none',
    billing_interval: row?.billing_interval ?? null,
    billable_seats: seats,
    seat_limit: row?.seat_limit ?? null,
    trial_ends_at: row?.trial_ends_at?.toISOString() ?? null,
    current_period_start: row?.current_period_start?.toISOString() ?? null,
    current_period_end: row?.current_period_end?.toISOString() ?? null,
    cancel_at_period_end: row?.cancel_at_period_end ?? false,
    has_payment_method: row?.has_payment_method ?? false,
    billing_email: row?.billing_email ?? null,
    updated_at: row?.reported_at?.toISOString() ?? null,
  };
}

/** The organization's Stripe customer, created (once, whatever the concurrency) when it has none. */
async function ensureCustomer(ctx: RequestContext, stripe: Stripe, orgId: string): Promise<string> {
  const existing = await findBilling(ctx.db, orgId);
  if (existing) return existing.customer_id;
  const org = await findOrganization(ctx.db, orgId);
  const customer = await callStripe(ctx, 'customers.create', () =>
    stripe.customers.create({ name: org?.name ?? orgId, metadata: { organization_id: orgId } }, { idempotencyKey: `customer-${orgId}` }),
  );
  await ctx.db
    .insertInto('organization_billing')
    .values({ org_id: orgId, customer_id: customer.id })
    .onConflict((oc) => oc.column('org_id').doNothing())
    .execute();
  return (await findBilling(ctx.db, orgId))?.customer_id ?? customer.id;
}

/** Where the provider sends the person back: the web app, at a path of it (never elsewhere). */
function returnUrl(ctx: RequestContext, path: string | undefined): string {
  const base = ctx.deps.config.webAppUrl ?? ctx.deps.config.baseUrl;
  return `${base}${path ?? '/settings/billing'}`;
}

export async function startCheckout(ctx: RequestContext, orgId: string, body: CheckoutCreate): Promise<BillingSession> {
  const stripe = requireStripe(ctx);
  const interval = body.billing_interval ?? 'month';
  const price = ctx.deps.config.stripe.prices[`${body.plan}:${interval}`];
  if (!price) {
    const sold = Object.keys(ctx.deps.config.stripe.prices).join(', ') || 'none';
    throw validationError([{ in: 'body', pointer: '/plan', message: `is not a plan this deployment sells with a ${interval}ly interval (sold: ${sold})` }]);
  }
  const held = await seatsInUse(ctx.db, orgId, { invites: false });
  const seats = body.seats ?? Math.max(1, held);
  if (seats < held) {
    throw validationError([{ in: 'body', pointer: '/seats', message: `must be at least the ${held} seats in use` }]);
  }
  if (await subscriptionInForce(ctx, orgId)) {
    throw new ApiError(
      'subscription_active',
      'This organization already has a paid subscription; change it in the customer portal (POST /organization/{id}/billing/portal).',
    );
  }
  const customer = await ensureCustomer(ctx, stripe, orgId);
  const back = returnUrl(ctx, body.return_path);
  const session = await callStripe(ctx, 'checkout.sessions.create', () =>
    stripe.checkout.sessions.create({
      mode: 'subscription',
      customer,
      client_reference_id: orgId,
      line_items: [{ price, quantity: seats }],
      success_url: back,
      cancel_url: back,
      metadata: { organization_id: orgId, plan: body.plan },
      subscription_data: { metadata: { organization_id: orgId, plan: body.plan } },
    }),
  );
  if (!session.url) throw unavailable();
  await ctx.write(async (w) => {
    w.audit({ targetId: orgId, changes: { plan: body.plan, billing_interval: interval, seats } });
  });
  return { url: session.url, expires_at: seconds(session.expires_at)?.toISOString() ?? null };
}

export async function openPortal(ctx: RequestContext, orgId: string, body: PortalCreate | undefined): Promise<BillingSession> {
  const stripe = requireStripe(ctx);
  const customer = await ensureCustomer(ctx, stripe, orgId);
  const session = await callStripe(ctx, 'billingPortal.sessions.create', () =>
    stripe.billingPortal.sessions.create({ customer, return_url: returnUrl(ctx, body?.return_path) }),
  );
  await ctx.write(async (w) => {
    w.audit({ targetId: orgId, changes: {} });
  });
  return { url: session.url, expires_at: null };
}
