/*
 * plugin_elf_seeds.c -- write crafted variants of a plugin, for the loader's
 * ELF check (core/plugin.c): usage `plugin_elf_seeds PLUGIN.so OUTDIR`.
 *
 * Each variant patches one value the check reads -- an ELF header field, a
 * program header, the dynamic section, a string table index -- to an
 * extreme (0, 1, the file's size or one less, INT64_MAX, UINT64_MAX, a
 * value that wraps when added), or cuts the file short. Every one of them
 * must be refused as "truncated or corrupt" without undefined behaviour:
 * test_plugin_safety runs this on tests/fixtures' elf_seed.so at test time,
 * and tests/fuzz/corpus/plugin_elf holds its output (plus the seed itself,
 * valid-seed.so) as the seeds of a fuzzer.
 *
 * The input must be a well-formed 64-bit ELF shared object with a dynamic
 * section holding DT_STRTAB, DT_STRSZ, DT_NEEDED and DT_RUNPATH.
 */
#include <elf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct image {
    unsigned char *b;
    size_t size;
    const char *outdir;
    int written;
};

static Elf64_Ehdr *ehdr(struct image *m)
{
    return (Elf64_Ehdr *)m->b;
}

static Elf64_Phdr *phdr(struct image *m, unsigned i)
{
    return (Elf64_Phdr *)(m->b + ehdr(m)->e_phoff) + i;
}

/* The first (which = 0) or last (which = 1) program header of a type. */
static int find_ph(struct image *m, uint32_t type, int which)
{
    int found = -1;
    for (unsigned i = 0; i < ehdr(m)->e_phnum; i++) {
        if (phdr(m, i)->p_type != type)
            continue;
        found = (int)i;
        if (which == 0)
            break;
    }
    if (found < 0) {
        fprintf(stderr, "plugin_elf_seeds: no program header of type %u\n", (unsigned)type);
        exit(1);
    }
    return found;
}

/* File offset of the dynamic section (through its loadable segment). */
static Elf64_Dyn *dynamic(struct image *m)
{
    Elf64_Phdr *d = phdr(m, (unsigned)find_ph(m, PT_DYNAMIC, 0));
    for (unsigned i = 0; i < ehdr(m)->e_phnum; i++) {
        Elf64_Phdr *p = phdr(m, i);
        if (p->p_type == PT_LOAD && d->p_vaddr >= p->p_vaddr && d->p_vaddr - p->p_vaddr < p->p_filesz)
            return (Elf64_Dyn *)(m->b + p->p_offset + (d->p_vaddr - p->p_vaddr));
    }
    fprintf(stderr, "plugin_elf_seeds: the dynamic section is in no loadable segment\n");
    exit(1);
}

static Elf64_Dyn *dyn_entry(struct image *m, int64_t tag)
{
    for (Elf64_Dyn *d = dynamic(m); d->d_tag != DT_NULL; d++)
        if (d->d_tag == tag)
            return d;
    fprintf(stderr, "plugin_elf_seeds: no dynamic entry %lld\n", (long long)tag);
    exit(1);
}

static void write_file(struct image *m, const char *name, const unsigned char *b, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.so", m->outdir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    m->written++;
}

/* A copy of the seed, changed by `patch`, written as NAME.so. */
#define VARIANT(name, patch)                                                                                    \
    do {                                                                                                        \
        struct image v = {malloc(seed->size), seed->size, seed->outdir, 0};                                    \
        memcpy(v.b, seed->b, seed->size);                                                                       \
        struct image *m = &v;                                                                                   \
        patch;                                                                                                  \
        write_file(seed, name, v.b, v.size);                                                                    \
        free(v.b);                                                                                              \
    } while (0)

static void header_variants(struct image *seed)
{
    const uint64_t size = seed->size;
    VARIANT("ehdr-phoff-0", ehdr(m)->e_phoff = 0);
    VARIANT("ehdr-phoff-1", ehdr(m)->e_phoff = 1);
    VARIANT("ehdr-phoff-size-1", ehdr(m)->e_phoff = size - 1);
    VARIANT("ehdr-phoff-size", ehdr(m)->e_phoff = size);
    VARIANT("ehdr-phoff-int64max", ehdr(m)->e_phoff = INT64_MAX);
    VARIANT("ehdr-phoff-uint64max", ehdr(m)->e_phoff = UINT64_MAX);
    VARIANT("ehdr-phoff-wraps", ehdr(m)->e_phoff = UINT64_MAX - sizeof(Elf64_Phdr) + 2);
    VARIANT("ehdr-phnum-0", ehdr(m)->e_phnum = 0);
    VARIANT("ehdr-phnum-pn_xnum", ehdr(m)->e_phnum = PN_XNUM);
    VARIANT("ehdr-phnum-max", ehdr(m)->e_phnum = PN_XNUM - 1);
    VARIANT("ehdr-phentsize-0", ehdr(m)->e_phentsize = 0);
    VARIANT("ehdr-phentsize-1", ehdr(m)->e_phentsize = 1);
    VARIANT("ehdr-phentsize-max", ehdr(m)->e_phentsize = UINT16_MAX);
    VARIANT("cut-in-elf-header", m->size = sizeof(Elf64_Ehdr) - 1);
    VARIANT("cut-in-program-headers", m->size = ehdr(m)->e_phoff + sizeof(Elf64_Phdr) + 10);
}

static void load_variants(struct image *seed)
{
    const uint64_t size = seed->size;
    int first = find_ph(seed, PT_LOAD, 0), last = find_ph(seed, PT_LOAD, 1);
    Elf64_Phdr *l = phdr(seed, (unsigned)last);
    const uint64_t end = l->p_offset + l->p_filesz;
#define LOAD(i) phdr(m, (unsigned)(i))
    VARIANT("load-offset-size", LOAD(last)->p_offset = size);
    VARIANT("load-offset-size-1", LOAD(last)->p_offset = size - 1);
    VARIANT("load-offset-int64max", LOAD(first)->p_offset = INT64_MAX);
    VARIANT("load-offset-uint64max", LOAD(first)->p_offset = UINT64_MAX);
    VARIANT("load-filesz-int64max", LOAD(last)->p_filesz = INT64_MAX; LOAD(last)->p_memsz = INT64_MAX);
    VARIANT("load-filesz-uint64max", LOAD(last)->p_filesz = UINT64_MAX; LOAD(last)->p_memsz = UINT64_MAX);
    VARIANT("load-offset-1-filesz-uint64max", LOAD(first)->p_offset = 1; LOAD(first)->p_filesz = UINT64_MAX;
            LOAD(first)->p_memsz = UINT64_MAX);
    VARIANT("load-filesz-over-memsz", LOAD(first)->p_memsz = LOAD(first)->p_filesz - 1);
    VARIANT("load-none", for (unsigned i = 0; i < ehdr(m)->e_phnum; i++) if (phdr(m, i)->p_type == PT_LOAD)
                             phdr(m, i)->p_type = PT_NULL);
    VARIANT("cut-in-last-segment", m->size = end - 1);
#undef LOAD
}

static void dynamic_variants(struct image *seed)
{
    const uint64_t size = seed->size;
    int d = find_ph(seed, PT_DYNAMIC, 0);
#define DYN phdr(m, (unsigned)d)
    VARIANT("dynamic-vaddr-int64max", DYN->p_vaddr = INT64_MAX);
    VARIANT("dynamic-vaddr-uint64max", DYN->p_vaddr = UINT64_MAX);
    VARIANT("dynamic-filesz-0", DYN->p_filesz = 0);
    VARIANT("dynamic-filesz-size-1", DYN->p_filesz = size - 1);
    VARIANT("dynamic-filesz-int64max", DYN->p_filesz = INT64_MAX);
    VARIANT("dynamic-filesz-uint64max", DYN->p_filesz = UINT64_MAX);
    VARIANT("dynamic-twice", phdr(m, (unsigned)find_ph(m, PT_GNU_STACK, 0))->p_type = PT_DYNAMIC);
    VARIANT("dynamic-no-end", for (Elf64_Dyn *e = dynamic(m); (char *)e < (char *)dynamic(m) + DYN->p_filesz; e++)
                                  if (e->d_tag == DT_NULL) e->d_tag = DT_DEBUG);
#undef DYN
}

static void string_variants(struct image *seed)
{
    const uint64_t size = seed->size;
    const uint64_t strsz = dyn_entry(seed, DT_STRSZ)->d_un.d_val;
    const uint64_t runpath = dyn_entry(seed, DT_RUNPATH)->d_un.d_val;
    VARIANT("strtab-size-1", dyn_entry(m, DT_STRTAB)->d_un.d_ptr = size - 1);
    VARIANT("strtab-int64max", dyn_entry(m, DT_STRTAB)->d_un.d_ptr = INT64_MAX);
    VARIANT("strtab-uint64max", dyn_entry(m, DT_STRTAB)->d_un.d_ptr = UINT64_MAX);
    VARIANT("strtab-twice", dyn_entry(m, DT_SYMENT)->d_tag = DT_STRTAB);
    VARIANT("strsz-0", dyn_entry(m, DT_STRSZ)->d_un.d_val = 0);
    VARIANT("strsz-size-1", dyn_entry(m, DT_STRSZ)->d_un.d_val = size - 1);
    VARIANT("strsz-int64max", dyn_entry(m, DT_STRSZ)->d_un.d_val = INT64_MAX);
    VARIANT("strsz-uint64max", dyn_entry(m, DT_STRSZ)->d_un.d_val = UINT64_MAX);
    VARIANT("strsz-cuts-runpath", dyn_entry(m, DT_STRSZ)->d_un.d_val = runpath + 3);
    VARIANT("needed-strsz", dyn_entry(m, DT_NEEDED)->d_un.d_val = strsz);
    VARIANT("needed-int64max", dyn_entry(m, DT_NEEDED)->d_un.d_val = INT64_MAX);
    VARIANT("needed-uint64max", dyn_entry(m, DT_NEEDED)->d_un.d_val = UINT64_MAX);
    VARIANT("runpath-strsz", dyn_entry(m, DT_RUNPATH)->d_un.d_val = strsz);
    VARIANT("runpath-uint64max", dyn_entry(m, DT_RUNPATH)->d_un.d_val = UINT64_MAX);
}

static void read_seed(const char *path, struct image *m)
{
    FILE *f = fopen(path, "rb");
    if (!f || fseek(f, 0, SEEK_END) != 0) {
        perror(path);
        exit(1);
    }
    long n = ftell(f);
    rewind(f);
    m->b = malloc((size_t)n);
    m->size = (size_t)n;
    if (n < (long)sizeof(Elf64_Ehdr) || !m->b || fread(m->b, 1, m->size, f) != m->size) {
        fprintf(stderr, "plugin_elf_seeds: cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    Elf64_Ehdr *e = ehdr(m);
    if (memcmp(e->e_ident, ELFMAG, SELFMAG) != 0 || e->e_ident[EI_CLASS] != ELFCLASS64 ||
        e->e_phentsize != sizeof(Elf64_Phdr) || e->e_phoff + (uint64_t)e->e_phnum * sizeof(Elf64_Phdr) > m->size) {
        fprintf(stderr, "plugin_elf_seeds: %s is not a well-formed 64-bit ELF file\n", path);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: plugin_elf_seeds PLUGIN.so OUTDIR\n");
        return 2;
    }
    struct image seed = {.outdir = argv[2]};
    read_seed(argv[1], &seed);
    header_variants(&seed);
    load_variants(&seed);
    dynamic_variants(&seed);
    string_variants(&seed);
    printf("%d\n", seed.written);
    free(seed.b);
    return 0;
}
