/**
 * The mapping language of synthetic tools, as data only: JSON pointers (RFC 6901) into the
 * arguments and earlier results (`$input`, `$step`), text templates with `{{input:<pointer>}}`
 * and `{{step:<id>:<pointer>}}` placeholders (`{{{{` is a literal `{{`), literals
 * (`$literal`), and plain JSON whose arrays and objects hold such values at any depth.
 * Nothing here is ever evaluated as code: a pointer walks only a value's own members and
 * array indexes, and built objects get their members defined, never assigned (a member named
 * `__proto__` is a member like any other).
 */

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export const MAX_DEPTH = 20;
const STEP_ID = /^[a-z][a-z0-9_]{0,39}$/;
const POINTER = /^(\/([^~/]|~[01])*)*$/;
const hasOwn = (o: object, k: string) => Object.prototype.hasOwnProperty.call(o, k);

// ---------------------------------------------------------------------------------------
// Pointers
// ---------------------------------------------------------------------------------------

export function isPointer(text: unknown): text is string {
  return typeof text === 'string' && text.length <= 1000 && POINTER.test(text);
}

/** The reference tokens of a valid pointer ("" → none), with `~1` → `/` then `~0` → `~`. */
export function parsePointer(pointer: string): string[] {
  if (pointer === '') return [];
  if (!isPointer(pointer)) throw new MappingError(`"${pointer}" is not a JSON pointer.`);
  return pointer
    .slice(1)
    .split('/')
    .map((t) => t.replace(/~1/g, '/').replace(/~0/g, '~'));
}

/** One token escaped for a pointer (`~` → `~0`, `/` → `~1`). */
export const escapeToken = (token: string | number) => String(token).replace(/~/g, '~0').replace(/\//g, '~1');
export const joinPointer = (base: string, ...tokens: (string | number)[]) => base + tokens.map((t) => `/${escapeToken(t)}`).join('');

/** The value a pointer names in `root`: only own members of objects and in-range indexes of arrays. */
export function resolvePointer(root: unknown, pointer: string): { found: true; value: unknown } | { found: false } {
  let current: unknown = root;
  for (const token of parsePointer(pointer)) {
    if (Array.isArray(current)) {
      if (!/^(0|[1-9][0-9]*)$/.test(token)) return { found: false };
      const index = Number(token);
      if (index >= current.length) return { found: false };
      current = current[index];
    } else if (current !== null && typeof current === 'object') {
      if (!hasOwn(current, token)) return { found: false };
      current = (current as Record<string, unknown>)[token];
    } else {
      return { found: false };
    }
  }
  return { found: true, value: current };
}

// ---------------------------------------------------------------------------------------
// Templates
// ---------------------------------------------------------------------------------------

export type TemplatePart = { text: string } | { input: string } | { step: string; pointer: string };

/** Splits a template into text and placeholders; throws MappingError naming what is wrong. */
export function parseTemplate(template: string): TemplatePart[] {
  const parts: TemplatePart[] = [];
  let text = '';
  let i = 0;
  while (i < template.length) {
    if (template.startsWith('{{{{', i)) {
      text += '{{';
      i += 4;
      continue;
    }
    if (!template.startsWith('{{', i)) {
      text += template[i];
      i += 1;
      continue;
    }
    const end = template.indexOf('}}', i + 2);
    if (end < 0) throw new MappingError(`The placeholder at character ${i} has no closing "}}" (write "{{{{" for a literal "{{").`);
    const body = template.slice(i + 2, end);
    let part: TemplatePart | null = null;
    if (body.startsWith('input:')) {
      const pointer = body.slice('input:'.length);
      if (isPointer(pointer)) part = { input: pointer };
    } else if (body.startsWith('step:')) {
      const rest = body.slice('step:'.length);
      const colon = rest.indexOf(':');
      const id = colon < 0 ? rest : rest.slice(0, colon);
      const pointer = colon < 0 ? '' : rest.slice(colon + 1);
      if (STEP_ID.test(id) && isPointer(pointer)) part = { step: id, pointer };
    }
    if (!part)
      throw new MappingError(`"{{${body}}}" is not a placeholder: use {{input:<pointer>}} or {{step:<step id>:<pointer>}} (write "{{{{" for a literal "{{").`);
    if (text) parts.push({ text });
    text = '';
    parts.push(part);
    i = end + 2;
  }
  if (text) parts.push({ text });
  return parts;
}

// ---------------------------------------------------------------------------------------
// Checking a mapping when it is saved
// ---------------------------------------------------------------------------------------

export interface MappingProblem {
  /** Pointer into the body. */
  pointer: string;
  message: string;
}

/**
 * Checks a value of the mapping language: reference forms have only their members, pointers
 * are pointers, templates parse, `$step` names one of `earlierSteps`, plain object members do
 * not start with `$`, nesting stays within MAX_DEPTH. Problems point at `at`.
 */
export function checkValue(value: unknown, at: string, earlierSteps: ReadonlySet<string>, where: string, problems: MappingProblem[], depth = 0): void {
  if (depth > MAX_DEPTH) {
    problems.push({ pointer: at, message: `nests deeper than ${MAX_DEPTH} levels` });
    return;
  }
  const stepKnown = (id: unknown, pointer: string) => {
    if (typeof id !== 'string' || !STEP_ID.test(id)) problems.push({ pointer, message: 'must be a step id' });
    else if (!earlierSteps.has(id)) problems.push({ pointer, message: `refers to step "${id}", which is not ${where}` });
  };
  if (Array.isArray(value)) {
    if (value.length > 1000) problems.push({ pointer: at, message: 'has more than 1000 items' });
    value.forEach((item, i) => checkValue(item, joinPointer(at, i), earlierSteps, where, problems, depth + 1));
    return;
  }
  if (value === null || typeof value !== 'object') return;
  const obj = value as Record<string, unknown>;
  const keys = Object.keys(obj);
  const only = (allowed: string[]) => {
    for (const k of keys)
      if (!allowed.includes(k)) problems.push({ pointer: joinPointer(at, k), message: `is not a member of a ${allowed[0]} reference (${allowed.join(', ')})` });
  };
  if (hasOwn(obj, '$literal')) {
    only(['$literal']);
    return;
  }
  if (hasOwn(obj, '$input')) {
    only(['$input', 'default']);
    if (!isPointer(obj.$input)) problems.push({ pointer: joinPointer(at, '$input'), message: 'must be a JSON pointer' });
    return;
  }
  if (hasOwn(obj, '$step')) {
    only(['$step', 'pointer', 'default']);
    stepKnown(obj.$step, joinPointer(at, '$step'));
    if (hasOwn(obj, 'pointer') && !isPointer(obj.pointer)) problems.push({ pointer: joinPointer(at, 'pointer'), message: 'must be a JSON pointer' });
    return;
  }
  if (hasOwn(obj, '$template')) {
    only(['$template']);
    const template = obj.$template;
    const pointer = joinPointer(at, '$template');
    if (typeof template !== 'string' || template.length > 4000) {
      problems.push({ pointer, message: 'must be a string of at most 4000 characters' });
      return;
    }
    try {
      for (const part of parseTemplate(template)) if ('step' in part) stepKnown(part.step, pointer);
    } catch (err) {
      if (!(err instanceof MappingError)) throw err;
      problems.push({ pointer, message: err.message });
    }
    return;
  }
  for (const k of keys) {
    if (k.startsWith('$'))
      problems.push({
        pointer: joinPointer(at, k),
        message: 'starts with "$" but is not $input, $step, $template or $literal (wrap a literal object in {"$literal": …})',
      });
    else checkValue(obj[k], joinPointer(at, k), earlierSteps, where, problems, depth + 1);
  }
}

/** Every step id a value refers to (`$step` and template placeholders), for ordering checks. */
export function stepsReferred(value: unknown, into = new Set<string>(), depth = 0): Set<string> {
  if (depth > MAX_DEPTH || value === null || typeof value !== 'object') return into;
  if (Array.isArray(value)) {
    for (const item of value) stepsReferred(item, into, depth + 1);
    return into;
  }
  const obj = value as Record<string, unknown>;
  if (hasOwn(obj, '$literal') || hasOwn(obj, '$input')) return into;
  if (hasOwn(obj, '$step')) {
    if (typeof obj.$step === 'string') into.add(obj.$step);
    return into;
  }
  if (hasOwn(obj, '$template')) {
    if (typeof obj.$template === 'string') {
      try {
        for (const part of parseTemplate(obj.$template)) if ('step' in part) into.add(part.step);
      } catch {
        /* checked elsewhere */
      }
    }
    return into;
  }
  for (const k of Object.keys(obj)) stepsReferred(obj[k], into, depth + 1);
  return into;
}

// ---------------------------------------------------------------------------------------
// Evaluating a mapping at run time
// ---------------------------------------------------------------------------------------

/** A reference that cannot be resolved (a step's missing value without a default), or a malformed mapping. */
export class MappingError extends Error {
  override readonly name = 'MappingError';
}

export interface MappingScope {
  input: unknown;
  /** Results of the steps that succeeded, by id; a step missing here failed or has not run. */
  results: ReadonlyMap<string, unknown>;
}

/**
 * The most one evaluation may build (a step's arguments, the output): about this many
 * characters of JSON text. A mapping copies what a reference names in full, once per
 * reference, so a small tool and a large argument could otherwise build hundreds of megabytes
 * (and the JSON text of them, twice more, for the answer): the budget is spent as the value is
 * built, and the evaluation stops where it runs out.
 */
export const MAX_BUILT_CHARS = 4 * 1024 * 1024;

/** What is left of an evaluation's budget; spent before each part is built. */
export class BuildBudget {
  constructor(private remaining: number = MAX_BUILT_CHARS) {}

  spend(chars: number): void {
    this.remaining -= chars;
    if (this.remaining < 0) {
      throw new MappingError(
        `The value would be larger than ${MAX_BUILT_CHARS} characters of JSON (4 MiB), the most a mapping may build; each reference copies what it names in full, so refer to less or send smaller arguments.`,
      );
    }
  }
}

/**
 * A copy of a JSON value as plain data, members defined (never assigned), so no name reaches a
 * prototype, paid for from `budget` as it goes (a string counts its length; it is shared, not
 * copied, but every answer writes it out).
 */
function copy(value: unknown, budget: BuildBudget, depth = 0): Json {
  if (depth > 64) throw new MappingError('A value nests too deeply to copy.');
  if (typeof value === 'string') {
    budget.spend(value.length + 2);
    return value;
  }
  budget.spend(8);
  if (value === null || typeof value === 'boolean') return value;
  if (typeof value === 'number') return Number.isFinite(value) ? value : null;
  if (Array.isArray(value)) return value.map((v) => copy(v, budget, depth + 1));
  if (typeof value === 'object') {
    const out: { [key: string]: Json } = {};
    for (const k of Object.keys(value)) {
      budget.spend(k.length + 3);
      define(out, k, copy((value as Record<string, unknown>)[k], budget, depth + 1));
    }
    return out;
  }
  return null;
}

function define(target: { [key: string]: Json }, key: string, value: Json) {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

function stepValue(scope: MappingScope, id: string, pointer: string): { found: true; value: unknown } | { found: false; why: string } {
  if (!scope.results.has(id)) return { found: false, why: `step "${id}" has no result (it failed or did not run)` };
  const hit = resolvePointer(scope.results.get(id), pointer);
  return hit.found ? hit : { found: false, why: `the result of step "${id}" has nothing at "${pointer}"` };
}

/** A template's text: strings as they are, other values as JSON text, missing ones as "". Paid for from `budget` before each part is added. */
export function renderTemplate(template: string, scope: MappingScope, budget: BuildBudget = new BuildBudget()): string {
  let out = '';
  for (const part of parseTemplate(template)) {
    if ('text' in part) {
      budget.spend(part.text.length);
      out += part.text;
      continue;
    }
    const hit = 'input' in part ? resolvePointer(scope.input, part.input) : stepValue(scope, part.step, part.pointer);
    if (!hit.found || hit.value === undefined) continue;
    if (typeof hit.value === 'string') {
      budget.spend(hit.value.length);
      out += hit.value;
    } else {
      out += JSON.stringify(copy(hit.value, budget));
    }
  }
  return out;
}

/** The value a mapping describes, built from the input and the steps' results, within one budget (MAX_BUILT_CHARS). */
export function evaluate(value: unknown, scope: MappingScope, depth = 0, budget: BuildBudget = new BuildBudget()): Json {
  if (depth > MAX_DEPTH) throw new MappingError(`The mapping nests deeper than ${MAX_DEPTH} levels.`);
  if (value === null || typeof value !== 'object') return copy(value, budget);
  if (Array.isArray(value)) {
    budget.spend(2);
    return value.map((item) => evaluate(item, scope, depth + 1, budget));
  }
  const obj = value as Record<string, unknown>;
  if (hasOwn(obj, '$literal')) return copy(obj.$literal, budget);
  if (hasOwn(obj, '$input')) {
    const hit = resolvePointer(scope.input, String(obj.$input));
    if (hit.found) return copy(hit.value, budget);
    return hasOwn(obj, 'default') ? copy(obj.default, budget) : null;
  }
  if (hasOwn(obj, '$step')) {
    const hit = stepValue(scope, String(obj.$step), typeof obj.pointer === 'string' ? obj.pointer : '');
    if (hit.found) return copy(hit.value, budget);
    if (hasOwn(obj, 'default')) return copy(obj.default, budget);
    throw new MappingError(
      `Cannot resolve {"$step": "${String(obj.$step)}"${typeof obj.pointer === 'string' && obj.pointer ? `, "pointer": "${obj.pointer}"` : ''}}: ${hit.why}, and it has no default.`,
    );
  }
  if (hasOwn(obj, '$template')) {
    const text = renderTemplate(String(obj.$template), scope, budget);
    budget.spend(2);
    return text;
  }
  budget.spend(2);
  const out: { [key: string]: Json } = {};
  for (const k of Object.keys(obj)) {
    budget.spend(k.length + 3);
    define(out, k, evaluate(obj[k], scope, depth + 1, budget));
  }
  return out;
}
