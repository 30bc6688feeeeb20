/**
 * Workflow definitions: named lists of steps. The REST layer resolves a name at submission and
 * snapshots the steps into the task, so a later change to a definition never alters a task that
 * was already submitted.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, open, readFile, rename, unlink } from 'node:fs/promises';
import { dirname } from 'node:path';
import { z } from 'zod';
import { StoredDefinitionSchema, type StoredDefinition, type WorkflowDefinition } from './schemas';

export class DefinitionConflictError extends Error {
  override name = 'DefinitionConflictError';
}

export interface PutResult {
  definition: StoredDefinition;
  /** false: a definition of that name existed (identical for `create`, replaced for `put`). */
  created: boolean;
}

export interface DefinitionsStore {
  list(): Promise<StoredDefinition[]>;
  get(name: string): Promise<StoredDefinition | undefined>;
  /** Adds a new definition; an identical repeat is a no-op, a different one throws DefinitionConflictError. */
  create(def: WorkflowDefinition, by: string): Promise<PutResult>;
  /** Adds or replaces. */
  put(def: WorkflowDefinition, by: string): Promise<PutResult>;
}

const FileSchema = z.object({ version: z.literal(1), definitions: z.array(StoredDefinitionSchema) });
type StoreFile = z.infer<typeof FileSchema>;

const sameSteps = (a: WorkflowDefinition, b: WorkflowDefinition): boolean =>
  JSON.stringify(a.steps) === JSON.stringify(b.steps);

/**
 * One JSON file. Writes are serialized in this process and atomic on disk: the new content goes
 * to a temporary file in the same directory, is flushed, and is renamed over the old file, so a
 * reader (or a crash) sees either the old or the new file, never half of one.
 */
export class JsonFileDefinitionsStore implements DefinitionsStore {
  private writes: Promise<unknown> = Promise.resolve();

  constructor(readonly path: string) {}

  async list(): Promise<StoredDefinition[]> {
    return (await this.read()).definitions.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  async get(name: string): Promise<StoredDefinition | undefined> {
    return (await this.read()).definitions.find((d) => d.name === name);
  }

  create(def: WorkflowDefinition, by: string): Promise<PutResult> {
    return this.update(def, by, false);
  }

  put(def: WorkflowDefinition, by: string): Promise<PutResult> {
    return this.update(def, by, true);
  }

  private update(def: WorkflowDefinition, by: string, replace: boolean): Promise<PutResult> {
    const run = async (): Promise<PutResult> => {
      const file = await this.read();
      const i = file.definitions.findIndex((d) => d.name === def.name);
      const now = new Date().toISOString();
      if (i >= 0) {
        const existing = file.definitions[i];
        if (sameSteps(existing, def)) return { definition: existing, created: false };
        if (!replace) throw new DefinitionConflictError(`workflow definition "${def.name}" exists with other steps`);
        const next: StoredDefinition = { ...existing, steps: def.steps, updatedAt: now, updatedBy: by };
        file.definitions[i] = next;
        await this.write(file);
        return { definition: next, created: false };
      }
      const added: StoredDefinition = {
        name: def.name,
        steps: def.steps,
        createdAt: now,
        updatedAt: now,
        updatedBy: by,
      };
      file.definitions.push(added);
      await this.write(file);
      return { definition: added, created: true };
    };
    const result = this.writes.then(run, run);
    this.writes = result.catch(() => undefined);
    return result;
  }

  private async read(): Promise<StoreFile> {
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { version: 1, definitions: [] };
      throw err;
    }
    const r = FileSchema.safeParse(JSON.parse(text));
    if (!r.success) throw new Error(`workflow definitions file ${this.path} is invalid: ${r.error.message}`);
    return r.data;
  }

  private async write(file: StoreFile): Promise<void> {
    await mkdir(dirname(this.path), { recursive: true });
    const tmp = `${this.path}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
    const fh = await open(tmp, 'wx', 0o600);
    try {
      await fh.writeFile(`${JSON.stringify(file, null, 2)}\n`, 'utf8');
      await fh.sync();
    } finally {
      await fh.close();
    }
    try {
      await rename(tmp, this.path);
    } catch (err) {
      await unlink(tmp).catch(() => undefined);
      throw err;
    }
  }
}
