import java.io.FileInputStream;
import java.io.InputStream;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.Properties;
import java.util.TreeSet;

/**
 * The JDK as oracle for kafkacodec.net (tests/security_support.py): "props FILE..." loads each
 * file with java.util.Properties.load(InputStream), as Kafka's tools do, and prints its entries;
 * "dn CERT..." prints each certificate's subject as X500Principal.getName() (Kafka's default SSL
 * principal). Every string is printed as the hex of its UTF-16 code units.
 */
public class SecurityOracle {
    static String hex(String s) {
        StringBuilder out = new StringBuilder();
        for (char c : s.toCharArray()) out.append(String.format("%04x", (int) c));
        return out.toString();
    }

    public static void main(String[] args) throws Exception {
        if (args[0].equals("props")) {
            for (int i = 1; i < args.length; i++) {
                System.out.println("file");
                Properties props = new Properties();
                try (InputStream in = new FileInputStream(args[i])) {
                    props.load(in);
                } catch (IllegalArgumentException e) {
                    System.out.println("error");
                    continue;
                }
                for (String key : new TreeSet<>(props.stringPropertyNames()))
                    System.out.println(hex(key) + " " + hex(props.getProperty(key)));
            }
        } else if (args[0].equals("dn")) {
            CertificateFactory factory = CertificateFactory.getInstance("X.509");
            for (int i = 1; i < args.length; i++) {
                try (InputStream in = new FileInputStream(args[i])) {
                    X509Certificate cert = (X509Certificate) factory.generateCertificate(in);
                    System.out.println(hex(cert.getSubjectX500Principal().getName()));
                }
            }
        }
    }
}
