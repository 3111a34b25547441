import type { Executor } from '../db/database';
import type { WriteScope } from './context';

/** What still uses something about to be deleted, counted: `{ count: 2, what: 'pending invites' }`. */
export interface Usage {
  count: number;
  what: string;
}

/**
 * Every cross-area hook, by name: what one area tells the others, and what each listener
 * receives. An area raises a hook (`ctx.deps.hooks.run('memberRemoved', w, orgId, userId)`);
 * modules listen by naming it in their definition (`hooks: { memberRemoved: … }`). Hooks that
 * take a WriteScope run inside the raising write's transaction, so what they change commits or
 * rolls back with it; usage hooks read, for a "still in use" refusal.
 */
export interface HookMap {
  /** A membership ended (removeMember): what the person owned in the organization goes with it. */
  memberRemoved: (w: WriteScope, orgId: string, userId: string) => Promise<void>;
  /** What still names a role, beside its members and restrictions (deleteRole refuses while anything does). */
  roleUsage: (db: Executor, orgId: string, roleId: string) => Promise<Usage>;
  /** What still names a team (deleteTeam refuses while anything does). */
  teamUsage: (db: Executor, orgId: string, teamId: string) => Promise<Usage>;
  /** A team is being deleted. */
  teamDeleted: (w: WriteScope, orgId: string, teamId: string) => Promise<void>;
  /** People joined or left teams: what teams reach (toolbox shares) changed for them. */
  teamMembershipChanged: (w: WriteScope, orgId: string, userIds: readonly string[]) => Promise<void>;
  /** A custom connector changed where credentials are sent. */
  connectorChanged: (w: WriteScope, orgId: string, slug: string) => Promise<void>;
  /** Who may see a custom connector changed. */
  connectorAccessChanged: (w: WriteScope, orgId: string, slug: string) => Promise<void>;
  /** What still uses a custom connector (deleteCustomConnector refuses while anything does). */
  connectorUsage: (db: Executor, orgId: string, slug: string) => Promise<Usage>;
  /** A toolbox is being deleted. */
  toolboxDeleted: (w: WriteScope, orgId: string, toolboxId: string) => Promise<void>;
  /** A toolbox was shared or unshared: who reaches it changed. */
  toolboxAccessChanged: (w: WriteScope, orgId: string, toolboxId: string) => Promise<void>;
}

export type HookName = keyof HookMap;
/** The hooks one module listens to. */
export type HookListeners = { [K in HookName]?: HookMap[K] };

/** The listeners of every module, in module order; built once per app (AppDeps.hooks). */
export class Hooks {
  private readonly listeners: { [K in HookName]?: HookMap[K][] } = {};

  constructor(modules: readonly { hooks?: HookListeners }[]) {
    for (const module of modules) {
      for (const [name, listener] of Object.entries(module.hooks ?? {}) as [HookName, HookMap[HookName]][]) {
        ((this.listeners[name] ??= []) as HookMap[HookName][]).push(listener);
      }
    }
  }

  /** Runs every listener of a hook, one after the other (they share the raising transaction). */
  async run<K extends HookName>(name: K, ...args: Parameters<HookMap[K]>): Promise<void> {
    for (const listener of this.listeners[name] ?? []) await (listener as (...a: Parameters<HookMap[K]>) => Promise<unknown>)(...args);
  }

  /** The usages the listeners of a usage hook report, in words (`2 pending invites`); empty when nothing uses it. */
  async usages<K extends 'roleUsage' | 'teamUsage' | 'connectorUsage'>(name: K, ...args: Parameters<HookMap[K]>): Promise<string[]> {
    const found: string[] = [];
    for (const listener of this.listeners[name] ?? []) {
      const { count, what } = await (listener as (...a: Parameters<HookMap[K]>) => Promise<Usage>)(...args);
      if (count > 0) found.push(`${count} ${what}`);
    }
    return found;
  }
}
